package localcluster

import (
	"flag"
	"io"

	"k8s.io/klog/v2"
)

// QuietLogs sends klog (the control plane's logger), errors included, to w only: allot up
// and the benchmarks keep the terminal for their own lines.
func QuietLogs(w io.Writer) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		_ = fs.Set(k, v)
	}
	klog.SetOutput(w)
}
