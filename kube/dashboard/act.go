package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/allot-dev/allot/kube/inspect"
)

// ActForm is what the console sends to change a workload (POST /api/act).
type ActForm struct {
	// Action is suspend, resume or delete.
	Action    string `json:"action"`
	Namespace string `json:"namespace"`
	// Name is the workload's name, or KIND/NAME where two kinds share it.
	Name string `json:"name"`
}

// act serves POST /api/act: a workload suspended, resumed or deleted as the person, as
// allot suspend, resume and delete do it.
func (s *Server) act(ctx context.Context, w http.ResponseWriter, r *http.Request, a *actor) {
	var f ActForm
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&f); err != nil {
		writeError(w, http.StatusBadRequest, "the request is not a JSON form: "+err.Error())
		return
	}
	if f.Action != "suspend" && f.Action != "resume" && f.Action != "delete" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("action %q is not allowed: suspend, resume or delete", f.Action))
		return
	}
	if f.Namespace == "" || f.Name == "" {
		writeError(w, http.StatusBadRequest, "namespace and name are required")
		return
	}
	wl, err := inspect.Find(ctx, a.control.Client, f.Namespace, f.Name)
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	var msg string
	if f.Action == "delete" {
		msg, err = a.control.Delete(ctx, wl)
	} else {
		msg, err = a.control.Suspend(ctx, wl, f.Action == "resume")
	}
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": msg})
}
