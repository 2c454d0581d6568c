package nriplugin

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/internal/wholefile"
)

// An image's own /etc/ld.so.preload is kept. The webhook mounts the node's preload list
// (HAMi-core's library on a hami-core node) over a sharing container's /etc/ld.so.preload,
// and a bind mount replaces the file: an image that preloads a library of its own (an
// allocator, a profiler) would lose it, and say nothing. What the image holds under that
// path is not known before the container's root filesystem is mounted, so the plugin
// gives each such container a list of its own and has the runtime finish it:
//
//   - when the container is created, the list is written under the sharing root
//     (preload/<container id>, the node's list) and mounted in place of the webhook's;
//   - an OCI createRuntime hook of the plugin's, run by the runtime once the root
//     filesystem is mounted and before the container's process starts, appends to that
//     list the image's own /etc/ld.so.preload, read from the root filesystem as the host
//     sees it (under the bind mount, which only the container's mount namespace has);
//   - the list goes with the container.
//
// A sharing container is one whose pod the scheduler bound as one (the annotation
// AnnotationGPUEnvPrefix+"ALLOT_GPU_SHARING", which only the bind writes) and which has
// the webhook's mount at that path; any other container is left as it is.

const (
	preloadPath = "/etc/ld.so.preload"
	// preloadDir is the directory of the containers' lists under the sharing root.
	preloadDir = "preload"
	// hookName is the hook's file in that directory.
	hookName = "allot-preload-hook"
)

// preloadHook is the hook: a shell script, since it runs on the host, not in Allot's
// image. The runtime passes the container's OCI state as JSON on its standard input, whose
// "bundle" names the directory holding the root filesystem ("rootfs", as containerd lays
// the bundle out); its argument is the container's list.
const preloadHook = `#!/bin/sh
# Allot's NRI plugin: appends the image's own /etc/ld.so.preload to the container's list.
set -eu
list="$1"
bundle=$(tr ',' '\n' | sed -n 's/^[{ ]*"bundle" *: *"\(.*\)"[} ]*$/\1/p' | head -n 1)
# Read on the host: a link in the image (its /etc, or the file) would name a host path.
etc="$bundle/rootfs/etc"
own="$etc/ld.so.preload"
if [ -n "$bundle" ] && [ ! -L "$bundle/rootfs" ] && [ ! -L "$etc" ] && [ ! -L "$own" ] && [ -f "$own" ]; then
  head -c 65536 "$own" >> "$list"
fi
`

// sharingContainer tells whether ctr of pod is a sharing container with the webhook's
// preload mount.
func sharingContainer(pod *api.PodSandbox, ctr *api.Container) bool {
	if _, ok := pod.GetAnnotations()[v1alpha1.AnnotationGPUEnvPrefix+"ALLOT_GPU_SHARING"]; !ok {
		return false
	}
	return slices.ContainsFunc(ctr.GetMounts(), func(m *api.Mount) bool { return m.GetDestination() == preloadPath })
}

// listPath is the container's own list.
func (p *plugin) listPath(id string) string {
	return filepath.Join(p.opts.SharingRoot, preloadDir, id)
}

// keepImagePreload adds to adjust the container's own list in place of the webhook's, and
// the hook that appends the image's to it.
func (p *plugin) keepImagePreload(pod *api.PodSandbox, ctr *api.Container, adjust *api.ContainerAdjustment) error {
	if p.opts.SharingRoot == "" || !sharingContainer(pod, ctr) {
		return nil
	}
	dir := filepath.Join(p.opts.SharingRoot, preloadDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("the preload list of container %s: %w", ctr.GetName(), err)
	}
	hook := filepath.Join(dir, hookName)
	if cur, err := os.ReadFile(hook); err != nil || string(cur) != preloadHook {
		if err := wholefile.Write(hook, strings.NewReader(preloadHook), 0o755, nil); err != nil {
			return fmt.Errorf("the preload hook: %w", err)
		}
	}
	// The node's list as the agent wrote it (empty where it enforces nothing by preload).
	base, err := os.ReadFile(filepath.Join(p.opts.SharingRoot, v1alpha1.PreloadListPath))
	if fi, serr := os.Stat(filepath.Join(p.opts.SharingRoot, v1alpha1.PreloadListPath)); err != nil && !os.IsNotExist(err) && (serr != nil || !fi.IsDir()) {
		return fmt.Errorf("the node's preload list: %w", err)
	}
	// Not written yet (missing, or the directory the kubelet made in its place for a pod
	// started before the agent, which writes it over that): the image's own alone, as
	// such a pod would have had no list.
	if err != nil {
		base = nil
	}
	if len(base) > 0 && !strings.HasSuffix(string(base), "\n") {
		base = append(base, '\n')
	}
	list := p.listPath(ctr.GetId())
	if err := wholefile.Write(list, bytes.NewReader(base), 0o644, nil); err != nil {
		return fmt.Errorf("the preload list of container %s: %w", ctr.GetName(), err)
	}
	adjust.RemoveMount(preloadPath)
	adjust.AddMount(&api.Mount{Destination: preloadPath, Source: list, Type: "bind", Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	// The runtime runs hooks with the environment they name, none otherwise.
	adjust.AddHooks(&api.Hooks{CreateRuntime: []*api.Hook{{Path: hook, Args: []string{hookName, list}, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}}}})
	return nil
}

// forgetPreload removes a container's list.
func (p *plugin) forgetPreload(id string) {
	if p.opts.SharingRoot != "" && id != "" {
		_ = os.Remove(p.listPath(id))
	}
}

// prunePreloads removes the lists of containers that are no longer there (removed while
// the plugin was not connected).
func (p *plugin) prunePreloads(containers []*api.Container) {
	if p.opts.SharingRoot == "" {
		return
	}
	live := map[string]bool{}
	for _, c := range containers {
		live[c.GetId()] = true
	}
	entries, _ := os.ReadDir(filepath.Join(p.opts.SharingRoot, preloadDir))
	for _, e := range entries {
		if name := e.Name(); name != hookName && !strings.HasPrefix(name, ".") && !live[name] {
			_ = os.Remove(p.listPath(name))
		}
	}
}
