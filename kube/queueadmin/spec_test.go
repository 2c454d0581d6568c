package queueadmin

import (
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// TestIdleTimeoutFlags: --idle-timeout sets and removes a class's timeout.
func TestIdleTimeoutFlags(t *testing.T) {
	var s v1alpha1.QueueSpec
	if err := Apply(Flags{"idle-timeout": {"interactive=2h", "inference=30m"}}, &s); err != nil {
		t.Fatal(err)
	}
	if s.IdleTimeout.Interactive.Duration != 2*time.Hour || s.IdleTimeout.Inference.Duration != 30*time.Minute {
		t.Fatalf("%+v", s.IdleTimeout)
	}
	if err := Apply(Flags{"idle-timeout": {"interactive=none", "inference=none"}}, &s); err != nil || s.IdleTimeout != nil {
		t.Fatalf("none left %+v, %v", s.IdleTimeout, err)
	}
}

// TestApplyRefusesNamingTheField: a value a flag would refuse, and a field that is not one,
// are refused naming them and what is allowed; a field left out is left as it was.
func TestApplyRefusesNamingTheField(t *testing.T) {
	s := v1alpha1.QueueSpec{Priority: 3}
	for flags, want := range map[string]Flags{
		`--quota "four" is not allowed: a whole number`:    {"quota": {"four"}},
		`--quota -1 is not allowed: 0 or more GPUs`:        {"quota": {"-1"}},
		`--limit "lots" is not allowed`:                    {"limit": {"lots"}},
		`--class "batch" is not allowed: train, interact`:  {"class": {"batch"}},
		`"colour" is not a field of a queue: one of quota`: {"colour": {"red"}},
	} {
		if err := Apply(want, &s); err == nil || !strings.Contains(err.Error(), flags) {
			t.Errorf("%v: %v, want %q", want, err, flags)
		}
	}
	if err := Apply(Flags{"quota": {"4"}, "namespaces": {"team-a", "team-b"}}, &s); err != nil {
		t.Fatal(err)
	}
	if s.GPU.Quota != 4 || strings.Join(s.Namespaces, ",") != "team-a,team-b" || s.Priority != 3 {
		t.Errorf("spec %+v", s)
	}
}
