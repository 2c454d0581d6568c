package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTraceCommand(t *testing.T) {
	dir := t.TempDir()
	nodes := filepath.Join(dir, "nodes.csv")
	pods := filepath.Join(dir, "pods.csv")
	svg := filepath.Join(dir, "plot.svg")
	os.WriteFile(nodes, []byte("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,2,T4\nn2,64000,262144,4,V100M16\n"), 0o644)
	os.WriteFile(pods, []byte("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,4000,1024,1,500\np2,4000,1024,2,1000\np3,8000,1024,1,1000\np4,1000,1024,0,0\n"), 0o644)
	out, err := run("sim", "trace", "--nodes", nodes, "--pods", pods, "--seeds", "1-3", "--policy", "default,fgd,random", "--plot", svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2 nodes, 6 GPUs, 4 pods", "POLICY", "allot (default)", "fgd", "random"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if b, err := os.ReadFile(svg); err != nil || !strings.Contains(string(b), "<svg") {
		t.Errorf("no SVG plot: %v", err)
	}
	out, err = run("sim", "trace", "--nodes", nodes, "--pods", pods, "--seeds", "5", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Policies []struct {
			Policy    string  `json:"policy"`
			AtEndMean float64 `json:"allocAtEndMean"`
		} `json:"policies"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Policies) != 5 {
		t.Fatalf("json: %v %+v", err, doc)
	}
	for _, p := range doc.Policies {
		if p.AtEndMean <= 0 || p.AtEndMean > 1 {
			t.Errorf("%s: allocation %v", p.Policy, p.AtEndMean)
		}
	}
	for args, want := range map[string]string{
		"--seeds 9-1":      "--seeds",
		"--policy magic":   `unknown policy "magic"`,
		"--tune 0.5":       "--tune 0.5 is not allowed",
		"-o xml":           "allowed values are table, json, csv",
		"--pods /nope.csv": "/nope.csv",
	} {
		a := append([]string{"sim", "trace", "--nodes", nodes, "--pods", pods}, strings.Fields(args)...)
		if _, err := run(a...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", args, err, want)
		}
	}
}

func TestWorkloadCommand(t *testing.T) {
	dir := t.TempDir()
	rt := filepath.Join(dir, "rt.csv")
	os.WriteFile(rt, []byte("runtime\n600\n3600\n7200\n"), 0o644)
	out, err := run("sim", "workload", "--runtimes", rt, "--days", "1", "--teams", "a:2,b:6", "--sizes", "1:3,2:1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"on 16 GPUs", "TEAM", "FAIR-SHARE GPU-HOURS", "UTILISATION", "\na     2"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if _, err := run("sim", "workload", "--runtimes", rt, "--teams", "a"); err == nil || !strings.Contains(err.Error(), "name:quota") {
		t.Errorf("bad teams: %v", err)
	}
}
