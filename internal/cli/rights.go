package cli

import (
	"fmt"
	"regexp"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// rbacRefusal is the API server's wording of an authorisation refusal (not an admission
// webhook's or policy's, which are refusals of the object, not of the person).
var rbacRefusal = regexp.MustCompile(`cannot [a-z]+ resource "[^"]*"(?: in API group "[^"]*")?(?: at the cluster scope| in the namespace "([^"]*)")`)

// explainRefusal keeps the API server's words for a right the user lacks, and adds who
// grants it: researchers hold edit in their team's namespace (granted there), and the
// chart's read-only researcher role outside it; anything else at the cluster scope is a
// cluster admin's.
func explainRefusal(err error) error {
	if err == nil || !apierrors.IsForbidden(err) {
		return err
	}
	m := rbacRefusal.FindStringSubmatch(err.Error())
	switch {
	case m == nil:
		return err
	case m[1] != "":
		return fmt.Errorf("%w\nThat right is granted in namespace %s by its admins: Kubernetes' edit role there is what allot submit, suspend and delete need. "+
			"allot works in the namespace of your kubeconfig's context; -n NAMESPACE names another", err, m[1])
	default:
		return fmt.Errorf("%w\nThat right is at the cluster scope, which only a cluster admin grants. Allot's Helm chart gives researchers "+
			"read of queues, nodes and DRA devices (the ClusterRole <release>-researcher, bound to the groups of researchers.groups); "+
			"every namespace's pods and events stay the admin's", err)
	}
}

// explainRefusals wraps every command of the tree so that a refusal says who grants the
// missing right (cobra has no hook for a command's error).
func explainRefusals(cmd *cobra.Command) {
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(c *cobra.Command, args []string) error { return explainRefusal(run(c, args)) }
	}
	for _, sub := range cmd.Commands() {
		explainRefusals(sub)
	}
}
