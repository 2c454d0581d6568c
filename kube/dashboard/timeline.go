package dashboard

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/kube/inspect"
)

// Step is one moment of a workload's story.
type Step struct {
	Time    time.Time `json:"time"`
	What    string    `json:"what"` // Submitted, Waiting, Started, Preempted, Resumed, Stopped, Failed
	Message string    `json:"message,omitempty"`
	Pods    int       `json:"pods,omitempty"`
}

// Event is an event as the detail page shows it.
type Event struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Object  string    `json:"object"`
	Message string    `json:"message"`
	Count   int32     `json:"count"`
}

// Detail is one workload with its pods, events and timeline.
type Detail struct {
	Workload inspect.Workload `json:"workload"`
	Events   []Event          `json:"events"`
	Timeline []Step           `json:"timeline"`
}

// Timeline tells a workload's story from its events (oldest first): submitted, waiting
// with the scheduler's reason, started, preempted and resumed. Pods of one gang bind in the
// same moment; consecutive steps of one kind become one step that counts the pods.
func Timeline(w inspect.Workload, events []corev1.Event) []Step {
	steps := []Step{{Time: w.Created, What: "Submitted"}}
	preempted := false
	add := func(t time.Time, what, msg string) {
		last := &steps[len(steps)-1]
		if last.What == what && (what != "Waiting" || last.Message == msg) {
			last.Pods++
			return
		}
		steps = append(steps, Step{Time: t, What: what, Message: msg, Pods: 1})
	}
	for _, e := range events {
		t := inspect.EventTime(e)
		if t.Before(w.Created.Add(-time.Second)) {
			continue // of an earlier workload of this name (event times are in seconds)
		}
		switch e.Reason {
		case "FailedScheduling":
			add(t, "Waiting", e.Message)
		case "Scheduled":
			switch last := steps[len(steps)-1].What; {
			case preempted:
				add(t, "Resumed", e.Message)
			case last == "Resumed":
				add(t, last, e.Message) // the rest of a gang coming back
			default:
				add(t, "Started", e.Message)
			}
			preempted = false
		case "Evicted":
			preempted = true
			add(t, "Preempted", e.Message)
		case "InteractiveTimeLimit":
			add(t, "Stopped", e.Message)
		case "IdleTimeout":
			// kube/idle suspended it for being idle: kept, so that it may be resumed.
			preempted = true
			add(t, "Stopped", e.Message)
		case "FailedBinding", "EvictionBlocked":
			add(t, "Failed", e.Message)
		}
	}
	return steps
}

func showEvents(events []corev1.Event) []Event {
	out := make([]Event, 0, len(events))
	for _, e := range events {
		out = append(out, Event{Time: inspect.EventTime(e), Type: e.Type, Reason: e.Reason,
			Object: fmt.Sprintf("%s/%s", e.InvolvedObject.Kind, e.InvolvedObject.Name), Message: e.Message, Count: e.Count})
	}
	return out
}
