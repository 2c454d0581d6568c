package inspect

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A refusal counts only from an Event in its object's own namespace: a tenant who writes a
// FailedCreate Event in its namespace naming another team's Job by UID puts no reason on it.
func TestRefusalsOnlyFromTheObjectsNamespace(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
	event := func(ns, objNS, msg string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: msg}, Reason: "FailedCreate", Message: msg, LastTimestamp: at,
			InvolvedObject: corev1.ObjectReference{Kind: "Job", Namespace: objNS, Name: "train", UID: "job-uid"}}
	}
	got := Refusals([]*corev1.Event{event("team-a", "team-a", "quota exceeded"), event("team-b", "team-a", "forged by team-b")})
	if r := got["job-uid"]; r.Message != "quota exceeded" {
		t.Errorf("team-a's Job shows %q, want only its own namespace's refusal", r.Message)
	}
	if r := Refusals([]*corev1.Event{event("team-b", "team-a", "forged by team-b")})["job-uid"]; r.Message != "" {
		t.Errorf("an Event of team-b's put %q on team-a's Job", r.Message)
	}
}
