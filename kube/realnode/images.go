package realnode

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// No registry is reachable from the node: its images are made here, as OCI image archives
// of one layer, and imported into containerd (ctr images import) under the names pods use.

// BusyboxImage is the small shell image users and tests look inside a container with:
// Debian's busybox-static and a link for each of its applets.
const BusyboxImage = "localhost/busybox:latest"

// PauseImage is the pod sandbox's image, pinned in containerd's config (the CRI would pull
// registry.k8s.io/pause otherwise): busybox sleeping, which is all a sandbox's process does
// here (the pod's PID namespace is not shared, so it reaps nothing).
const PauseImage = "localhost/pause:allot"

// Image is one image to make: its files and its process.
type Image struct {
	Name       string
	Files      []File
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string // uid:gid the process runs as; "" for root
}

// File is one entry of an image's layer: a copy of the host file From, a directory
// (From and Link empty, Dir true) or a symbolic link to Link.
type File struct {
	Path string // in the image, absolute
	From string
	Link string
	Dir  bool
	Mode int64
}

// BusyboxFiles are the files of an image holding the static busybox at /bin/busybox and
// a link for each of its applets under /bin, with the directories a container expects.
func BusyboxFiles() ([]File, error) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return nil, fmt.Errorf("the node's shell image is made of Debian's busybox-static (apt-get install busybox-static): %w", err)
	}
	if out, err := exec.Command("file", "-L", bb).Output(); err == nil && !bytes.Contains(out, []byte("statically linked")) {
		return nil, fmt.Errorf("%s is not statically linked: install busybox-static, not busybox", bb)
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", bb, err)
	}
	files := []File{{Path: "/bin", Dir: true, Mode: 0o755}, {Path: "/bin/busybox", From: bb, Mode: 0o755},
		{Path: "/tmp", Dir: true, Mode: 0o1777}, {Path: "/etc", Dir: true, Mode: 0o755},
		{Path: "/dev", Dir: true, Mode: 0o755}, {Path: "/proc", Dir: true, Mode: 0o755},
		{Path: "/sys", Dir: true, Mode: 0o755}, {Path: "/root", Dir: true, Mode: 0o700}}
	for _, a := range strings.Fields(string(list)) {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		files = append(files, File{Path: "/bin/" + a, Link: "busybox"})
	}
	return files, nil
}

// PreloadingImage is a shell image whose own /etc/ld.so.preload names PreloadingLibrary, as
// an image preloading an allocator or a profiler does: what a sharing container must keep
// beside HAMi-core's list.
const (
	PreloadingImage   = "localhost/preloaded:latest"
	PreloadingLibrary = "/usr/lib/libown-allocator.so"
)

// PreloadingImageOf is the PreloadingImage, its list written under dir.
func PreloadingImageOf(dir string) (Image, error) {
	bb, err := BusyboxFiles()
	if err != nil {
		return Image{}, err
	}
	list := filepath.Join(dir, "image-ld.so.preload")
	if err := os.WriteFile(list, []byte(PreloadingLibrary+"\n"), 0o644); err != nil {
		return Image{}, err
	}
	return Image{Name: PreloadingImage, Files: append(bb, File{Path: "/etc/ld.so.preload", From: list, Mode: 0o644}), Cmd: []string{"sh"}}, nil
}

// WriteArchive writes img as an OCI image layout archive (what ctr images import reads)
// to w, for linux/amd64 or the host's architecture.
func WriteArchive(w io.Writer, img Image, arch string) error {
	layer, err := layerTar(img.Files)
	if err != nil {
		return err
	}
	layerDigest := digest(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": arch,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": img.Entrypoint, "Cmd": img.Cmd, "Env": append([]string{"PATH=/bin:/usr/bin:/sbin:/usr/sbin"}, img.Env...), "User": img.User},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor("application/vnd.oci.image.config.v1+json", config),
		"layers":        []any{descriptor("application/vnd.oci.image.layer.v1.tar", layer)},
	})
	if err != nil {
		return err
	}
	md := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	md["platform"] = map[string]string{"architecture": arch, "os": "linux"}
	md["annotations"] = map[string]string{
		"io.containerd.image.name":          img.Name,
		"org.opencontainers.image.ref.name": img.Name[strings.LastIndex(img.Name, ":")+1:],
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []any{md}})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	put := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	for _, e := range []struct {
		name string
		b    []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(layer), layer},
		{blobPath(config), config},
		{blobPath(manifest), manifest},
	} {
		if err := put(e.name, e.b); err != nil {
			return err
		}
	}
	return tw.Close()
}

func layerTar(files []File) ([]byte, error) {
	sort.SliceStable(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		name := strings.TrimPrefix(path.Clean(f.Path), "/")
		h := &tar.Header{Name: name, Mode: f.Mode, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
		default:
			b, err := os.ReadFile(f.From)
			if err != nil {
				return nil, err
			}
			if h.Mode == 0 {
				h.Mode = 0o644
			}
			h.Typeflag, h.Size = tar.TypeReg, int64(len(b))
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
			if _, err := tw.Write(b); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func blobPath(b []byte) string { return "blobs/sha256/" + strings.TrimPrefix(digest(b), "sha256:") }

func descriptor(mediaType string, b []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digest(b), "size": len(b)}
}

// importImage writes img as an archive under dir and imports it into containerd's
// Kubernetes namespace, unpacked for the CRI's snapshotter.
func importImage(ctr, address, dir string, img Image, arch string) error {
	archive := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(img.Name)+".tar")
	f, err := os.Create(archive)
	if err != nil {
		return err
	}
	if err := WriteArchive(f, img, arch); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	out, err := exec.Command(ctr, "--address", address, "--namespace", "k8s.io", "images", "import",
		"--snapshotter", snapshotter, "--platform", "linux/"+arch, archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("importing %s into containerd: %w\n%s", img.Name, err, out)
	}
	return nil
}
