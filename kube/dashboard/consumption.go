package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/consumption"
)

// Consumption is /api/consumption: the GPU-hours of a period of days summed by the
// dimensions asked, as allot report prints them.
type Consumption struct {
	From  string            `json:"from"`
	To    string            `json:"to"`
	By    []string          `json:"by"`
	Days  int               `json:"days"` // days with figures
	Lines []ConsumptionLine `json:"lines"`
	// Unpriced says why there is no cost where the chart's prices leave a pool and model out.
	Unpriced string `json:"unpriced,omitempty"`
}

// ConsumptionLine is one group's GPU-hours: given, measured, busy.
type ConsumptionLine struct {
	By       []string `json:"by"`
	GPUHours float64  `json:"gpuHours"`
	Measured float64  `json:"measuredGPUHours"`
	Used     float64  `json:"usedGPUHours"`
	// Cost is at the chart's prices (consumption.prices), where it was given some.
	Cost *float64 `json:"cost,omitempty"`
}

// consumption serves /api/consumption?from=DATE&to=DATE&by=queue,user to whoever may read
// the days themselves (list ConfigMaps in Allot's namespace, as allot report needs): what
// teams consumed is an admin's to see, whatever a person may see of the workloads.
func (s *Server) consumption(w http.ResponseWriter, r *http.Request, id *Identity) {
	if id != nil && s.access != nil {
		ok, err := s.access.review(r.Context(), id, authorizationv1.ResourceAttributes{Namespace: v1alpha1.SystemNamespace, Verb: "list", Resource: "configmaps"})
		if err != nil || !ok {
			http.Error(w, fmt.Sprintf("GPU consumption is for those who may list ConfigMaps in %s (where the scheduler keeps it): %s may not", v1alpha1.SystemNamespace, id.User), http.StatusForbidden)
			return
		}
	}
	q := r.URL.Query()
	first, last, err := consumption.Dates(q.Get("from"), q.Get("to"), time.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	by := []string{"queue"}
	if v := q.Get("by"); v != "" {
		by = strings.Split(v, ",")
		for i := range by {
			by[i] = strings.TrimSpace(by[i])
		}
	}
	days, err := consumption.Read(r.Context(), s.client, first, last)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	parents := map[string]string{}
	for _, o := range s.queues.GetStore().List() {
		if q, ok := o.(*v1alpha1.Queue); ok {
			parents[q.Name] = q.Spec.Parent
		}
	}
	groups, err := consumption.Sum(days, by, parents)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out := Consumption{From: first, To: last, By: by, Days: len(days), Lines: []ConsumptionLine{}}
	var costs []float64
	prices, err := consumption.Prices(r.Context(), s.client)
	if err == nil && len(prices) > 0 {
		costs, err = consumption.Costs(days, by, parents, groups, prices)
	}
	if err != nil {
		out.Unpriced = err.Error()
	}
	for i, g := range groups {
		l := ConsumptionLine{By: g.By, GPUHours: g.Allocated / 3600, Measured: g.Measured / 3600, Used: g.Used / 3600}
		if costs != nil {
			l.Cost = &costs[i]
		}
		out.Lines = append(out.Lines, l)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(out)
}
