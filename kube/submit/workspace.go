package submit

import (
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// The container's surroundings, as the NetApp report drives Run:ai's CLI (docs/cli.md):
// where it starts, as whom, and what it mounts besides PVCs.

// RunAs is a uid and gid for the container's processes (--run-as-user: the submitter's).
type RunAs struct{ UID, GID int64 }

// workspace adds to the pod the working directory, the user, a memory-backed /dev/shm and
// the NFS and node paths the spec names, or says which flag is wrong and how to write it.
func (s Spec) workspace(spec *corev1.PodSpec, ann map[string]string) error {
	c := &spec.Containers[0]
	if s.WorkingDir != "" {
		if !path.IsAbs(s.WorkingDir) {
			return fmt.Errorf("--working-dir %q is not allowed: an absolute path in the container, such as /workspace", s.WorkingDir)
		}
		c.WorkingDir = s.WorkingDir
	}
	if u := s.RunAs; u != nil {
		if u.UID < 0 || u.GID < 0 {
			return fmt.Errorf("--run-as-user: uid %d, gid %d is not allowed: 0 or more", u.UID, u.GID)
		}
		nonRoot := u.UID != 0
		c.SecurityContext = &corev1.SecurityContext{RunAsUser: &u.UID, RunAsGroup: &u.GID, RunAsNonRoot: &nonRoot}
	}
	add := func(name, mountPath string, readOnly bool, src corev1.VolumeSource) {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: name, VolumeSource: src})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: mountPath, ReadOnly: readOnly})
	}
	if s.LargeSHM {
		// A slice's /dev/shm is what its GPU's sharing gives (on mps and hami-core pools, the
		// directory the node's MPS servers and HAMi-core use), which the webhook mounts in
		// place of any the pod brings.
		if share, err := v1alpha1.ParseGPUShare(ann); err == nil && share.Shared() {
			return fmt.Errorf("--large-shm with a slice of a GPU (-g below 1, --gpu-memory, --gpu-compute) is not allowed: a slice's /dev/shm is its GPU's sharing directory, with no size of its own; --large-shm is for whole GPUs or none")
		}
		add("dshm", "/dev/shm", false, corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}})
	}
	for i, v := range s.NFS {
		server, p, mount, ro, err := splitMount(v, 3)
		if err != nil || server == "" {
			return fmt.Errorf("--nfs %q is not allowed: write SERVER:/exported/path:/mount/path, with :ro at the end for read-only", v)
		}
		add(fmt.Sprintf("nfs-%d", i), mount, ro, corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: server, Path: p, ReadOnly: ro}})
	}
	for i, v := range s.HostPaths {
		_, host, mount, ro, err := splitMount(v, 2)
		if err != nil {
			return fmt.Errorf("-v/--volume %q is not allowed: write /node/path:/mount/path, with :ro at the end for read-only (the queue's spec.hostPaths says which node paths it allows)", v)
		}
		add(fmt.Sprintf("host-%d", i), mount, ro, corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}})
	}
	return nil
}

// splitMount reads "[SERVER:]/source:/mount[:ro]" (parts 3 with a server, 2 without): both
// paths absolute, with no "..".
func splitMount(v string, parts int) (server, source, mount string, ro bool, err error) {
	f := strings.Split(v, ":")
	if len(f) == parts+1 && f[parts] == "ro" {
		f, ro = f[:parts], true
	}
	if len(f) != parts {
		return "", "", "", false, fmt.Errorf("%d parts", len(f))
	}
	if parts == 3 {
		server, f = f[0], f[1:]
	}
	source, mount = f[0], f[1]
	for _, p := range []string{source, mount} {
		if !path.IsAbs(p) || slices.Contains(strings.Split(p, "/"), "..") {
			return "", "", "", false, fmt.Errorf("%q is not an absolute path", p)
		}
	}
	return server, source, mount, ro, nil
}
