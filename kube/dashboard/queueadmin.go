package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/allot-dev/allot/kube/queueadmin"
)

// QueueForm is what the console sends to create or edit a queue (POST /api/queue): allot
// queue create and edit's flags by name, each with its values, through the same package,
// so that the same values are refused in the same words. Editing sends only the fields
// changed; the others stay as the queue has them.
type QueueForm struct {
	// Action is create or edit.
	Action string           `json:"action"`
	Name   string           `json:"name"`
	Flags  queueadmin.Flags `json:"flags"`
}

// queue serves POST /api/queue as the person: who may create or change Queues is RBAC's
// to say (an admin's right, which researchers' roles do not hold).
func (s *Server) queue(ctx context.Context, w http.ResponseWriter, r *http.Request, a *actor) {
	var f QueueForm
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&f); err != nil {
		writeError(w, http.StatusBadRequest, "the request is not a JSON form: "+err.Error())
		return
	}
	if f.Action != "create" && f.Action != "edit" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("action %q is not allowed: create or edit", f.Action))
		return
	}
	if errs := validation.IsDNS1123Subdomain(f.Name); len(errs) > 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("name %q is not allowed: %s", f.Name, errs[0]))
		return
	}
	if f.Action == "edit" && len(f.Flags) == 0 {
		writeError(w, http.StatusBadRequest, "nothing to change: fill the fields to change (the others stay as the queue has them)")
		return
	}
	if _, ok := f.Flags["quota"]; f.Action == "create" && !ok {
		writeError(w, http.StatusBadRequest, "--quota is required to create a queue: the GPUs it is guaranteed")
		return
	}
	var err error
	if f.Action == "create" {
		err = queueadmin.Create(ctx, a.submit.Allot, f.Name, f.Flags)
	} else {
		err = queueadmin.Edit(ctx, a.submit.Allot, f.Name, f.Flags)
	}
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	// As allot queue create and edit say it.
	done := map[string]string{"create": "created", "edit": "updated"}[f.Action]
	writeJSON(w, http.StatusOK, map[string]string{"message": fmt.Sprintf("queue %s %s", f.Name, done)})
}
