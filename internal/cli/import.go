package cli

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/migrate"
)

// newImportCmd: allot import, the queues of KAI-Scheduler (Run:ai) and Volcano as Allot's.
func newImportCmd() *cobra.Command {
	var c *conn
	var apply bool
	var file string
	var from []string
	cmd := &cobra.Command{
		Use:     "import [--from kai,volcano,runai] [-f FILE] [--apply]",
		GroupID: "admin",
		Short:   "Turn KAI-Scheduler (Run:ai) and Volcano queues into Allot queues: printed, or written with --apply",
		Long: `allot import reads the queues of KAI-Scheduler (scheduling.run.ai/v2, as Run:ai writes them) and
Volcano (scheduling.volcano.sh/v1beta1) from the cluster, or from exported YAML with -f, and
prints the Allot queues they become, as YAML, with a table of every field read: what it became
in Allot, or why Allot cannot honour it. --apply writes them: a queue is created, or updated
in the fields its source decides; none is deleted. HAMi has no queues (docs/migration.md).

Run:ai keeps its projects and departments, with their quotas per node pool, in its control
plane: save what its API returns (GET /api/v1/org-unit/departments and
/api/v1/org-unit/projects, one response after the other in one file) and read it with
--from runai -f FILE.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var kinds []*migrate.Kind
			for _, f := range from {
				k, err := migrate.KindNamed(strings.TrimSpace(f))
				if err != nil {
					return fmt.Errorf("--from: %w", err)
				}
				if !slices.Contains(kinds, k) { // --from kai,kai reads KAI's once
					kinds = append(kinds, k)
				}
			}
			if len(kinds) == 0 {
				return fmt.Errorf("--from names no kind: kai, volcano, runai or several")
			}
			for _, k := range kinds {
				if k.FileOnly() && file == "" {
					return fmt.Errorf("--from %s: %s: not kept in a cluster, read from a file: give it with -f", k.Short, k)
				}
			}
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			ctx := cmd.Context()
			var objs []*unstructured.Unstructured
			var reads []migrate.Read
			var existing map[string]bool
			if file == "" || apply {
				if err := c.connect(ctx); err != nil {
					return err
				}
				qs, err := inspect.Queues(ctx, c.allot)
				switch {
				case err == nil:
					existing = map[string]bool{}
					for _, q := range qs {
						existing[q.Name] = true
					}
				case apply:
					return fmt.Errorf("reading Allot's queues (is Allot installed? its CRDs serve allot.dev): %w", err)
				default:
					// A look before Allot is installed: parents outside the import go unchecked.
					fmt.Fprintf(errOut, "Allot's queues not read (%v): parents that are not imported are not checked\n", err)
				}
			}
			var err error
			if file != "" {
				var r io.Reader = cmd.InOrStdin()
				name := "standard input"
				if file != "-" {
					fh, err := os.Open(file)
					if err != nil {
						return fmt.Errorf("-f: %w", err)
					}
					defer fh.Close()
					r, name = fh, file
				}
				objs, reads, err = migrate.ReadFile(r, name, kinds)
			} else {
				fmt.Fprintf(errOut, "reading %s …\n", kindNames(kinds))
				objs, reads, err = migrate.ReadCluster(ctx, c.dyn, kinds)
			}
			if err != nil {
				return err
			}
			res, err := migrate.Convert(objs, existing)
			if err != nil {
				return fmt.Errorf("nothing imported:\n%w", err)
			}
			for _, r := range reads {
				fmt.Fprintf(out, "# %s\n", r)
			}
			fmt.Fprintln(out, "# HAMi has no queues: nothing of it to import (docs/migration.md)")
			if len(res.Queues) == 0 {
				fmt.Fprintln(out, "# no queues to import")
				return nil
			}
			if !apply {
				if err := printImportYAML(out, res); err != nil {
					return err
				}
			}
			printImportTable(out, res)
			if !apply {
				fmt.Fprintf(out, "# nothing written: allot import --apply writes these %d queues\n", len(res.Queues))
				return nil
			}
			n := 0
			return migrate.Apply(ctx, c.allot, res.Queues, func(name, what string) {
				n++
				fmt.Fprintf(out, "queue %s %s (%d/%d)\n", name, what, n, len(res.Queues))
			})
		},
	}
	cmd.Flags().BoolVar(&apply, "apply", false, "write the queues (create, or update the fields their source decides; never delete)")
	cmd.Flags().StringVarP(&file, "filename", "f", "", "read exported YAML or JSON (kubectl get queues.scheduling.run.ai -o yaml) instead of the cluster; - for standard input")
	cmd.Flags().StringSliceVar(&from, "from", []string{"kai", "volcano"}, "which schedulers' queues to read: kai (KAI-Scheduler, Run:ai's queues in the cluster), volcano, runai (Run:ai's projects and departments from its API, with -f)")
	c = addConn(cmd)
	return cmd
}

func kindNames(kinds []*migrate.Kind) string {
	var s []string
	for _, k := range kinds {
		s = append(s, k.String())
	}
	return strings.Join(s, " and ")
}

// printImportYAML writes the queues as one YAML stream kubectl apply takes.
func printImportYAML(w io.Writer, res *migrate.Result) error {
	type queue struct {
		APIVersion string             `json:"apiVersion"`
		Kind       string             `json:"kind"`
		Metadata   map[string]string  `json:"metadata"`
		Spec       v1alpha1.QueueSpec `json:"spec"`
	}
	for _, im := range res.Queues {
		b, err := yaml.Marshal(queue{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Queue",
			Metadata: map[string]string{"name": im.Queue.Name}, Spec: im.Queue.Spec})
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "---\n# from %s/%s\n%s", im.From.Short, im.Queue.Name, b)
	}
	fmt.Fprintln(w, "---")
	return nil
}

// printImportTable writes every field read and what it became, as YAML comments so that
// the whole of a dry run stays one YAML stream.
func printImportTable(w io.Writer, res *migrate.Result) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tFIELD\tVALUE\tALLOT\tWHY")
	for _, n := range res.Notes {
		allot := n.Allot
		if !n.Carried() {
			allot = "✗ not carried"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Queue, n.Field, n.Value, allot, n.Why)
	}
	_ = tw.Flush()
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		fmt.Fprintf(w, "# %s\n", strings.TrimRight(l, " "))
	}
	fmt.Fprintf(w, "# %d fields read, %d not carried (✗), into %d Allot queues\n", len(res.Notes), res.NotCarried(), len(res.Queues))
}
