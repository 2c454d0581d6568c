package realnode

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// AllotImage is Allot's own image as the chart names it (name: its repository and tag),
// made of binary (cmd/allot built with cgo, as the repository's Dockerfile builds it) and
// the shared libraries it loads, taken from this machine: what the Dockerfile's distroless
// base gives it (glibc and its loader), running as distroless's nonroot user (65532). No
// registry is reachable, so it is made here rather than pulled.
func AllotImage(name, binary string) (Image, error) {
	libs, err := sharedLibraries(binary)
	if err != nil {
		return Image{}, err
	}
	files := []File{
		{Path: "/allot", From: binary, Mode: 0o755},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
		{Path: "/etc", Dir: true, Mode: 0o755},
		{Path: "/dev", Dir: true, Mode: 0o755},
		{Path: "/proc", Dir: true, Mode: 0o755},
		{Path: "/sys", Dir: true, Mode: 0o755},
	}
	dirs := map[string]bool{"/": true, "/tmp": true, "/etc": true}
	for _, lib := range libs {
		for d := filepath.Dir(lib); !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			files = append(files, File{Path: d, Dir: true, Mode: 0o755})
		}
		files = append(files, File{Path: lib, From: lib, Mode: 0o755})
	}
	return Image{Name: name, Files: files, Entrypoint: []string{"/allot"}, User: "65532:65532"}, nil
}

// sharedLibraries are the absolute paths of the libraries binary loads at its start, as
// the dynamic loader resolves them here (ldd), its loader included; none for a static one.
func sharedLibraries(binary string) ([]string, error) {
	out, err := exec.Command("ldd", binary).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %v: %s", binary, err, out)
	}
	var libs []string
	s := bufio.NewScanner(bytes.NewReader(out))
	for s.Scan() {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)", "/lib64/ld-linux-x86-64.so.2 (0x…)"
		f := strings.Fields(s.Text())
		for i, w := range f {
			if strings.HasPrefix(w, "/") && (i == 0 || f[i-1] == "=>") {
				libs = append(libs, w)
			}
		}
		if strings.Contains(s.Text(), "not found") {
			return nil, fmt.Errorf("ldd %s: %s", binary, strings.TrimSpace(s.Text()))
		}
	}
	return libs, nil
}
