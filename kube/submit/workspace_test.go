package submit

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// The flags of the NetApp report's sessions become the pod's working directory, user,
// memory-backed /dev/shm, NFS and node-path volumes; each mistake names the flag and how
// to write it.
func TestWorkspaceFlags(t *testing.T) {
	s := base()
	s.GPUs, s.WorkingDir, s.LargeSHM = "1", "/workspace", true
	s.RunAs = &RunAs{UID: 1000, GID: 100}
	s.NFS = []string{"nfs.lab:/exports/imagenet:/data/imagenet:ro", "10.0.0.5:/home/alice:/home/alice"}
	s.HostPaths = []string{"/scratch/alice:/scratch"}
	objs, err := s.Objects()
	if err != nil {
		t.Fatal(err)
	}
	pod := objs[0].(*batchv1.Job).Spec.Template.Spec
	c := pod.Containers[0]
	if c.WorkingDir != "/workspace" {
		t.Errorf("working dir %q", c.WorkingDir)
	}
	if sc := c.SecurityContext; sc == nil || *sc.RunAsUser != 1000 || *sc.RunAsGroup != 100 || !*sc.RunAsNonRoot {
		t.Errorf("security context %+v", sc)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	shm := vols[mounts["/dev/shm"].Name]
	if shm.EmptyDir == nil || shm.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("/dev/shm: %+v", shm)
	}
	if m := mounts["/data/imagenet"]; !m.ReadOnly || vols[m.Name].NFS == nil || *vols[m.Name].NFS != (corev1.NFSVolumeSource{Server: "nfs.lab", Path: "/exports/imagenet", ReadOnly: true}) {
		t.Errorf("/data/imagenet: %+v %+v", m, vols[m.Name].NFS)
	}
	if m := mounts["/home/alice"]; m.ReadOnly || vols[m.Name].NFS == nil || vols[m.Name].NFS.Server != "10.0.0.5" {
		t.Errorf("/home/alice: %+v", m)
	}
	if m := mounts["/scratch"]; m.ReadOnly || vols[m.Name].HostPath == nil || vols[m.Name].HostPath.Path != "/scratch/alice" {
		t.Errorf("/scratch: %+v", m)
	}

	for _, c := range []struct {
		change func(*Spec)
		want   string
	}{
		{func(s *Spec) { s.WorkingDir = "workspace" }, `--working-dir "workspace" is not allowed: an absolute path`},
		{func(s *Spec) { s.NFS = []string{"/exports:/data"} }, `--nfs "/exports:/data" is not allowed: write SERVER:/exported/path:/mount/path`},
		{func(s *Spec) { s.NFS = []string{"nfs:/a/../etc:/data"} }, `--nfs "nfs:/a/../etc:/data" is not allowed`},
		{func(s *Spec) { s.NFS = []string{"nfs:/exports:/data:rw"} }, `--nfs "nfs:/exports:/data:rw" is not allowed`},
		{func(s *Spec) { s.HostPaths = []string{"/data"} }, `-v/--volume "/data" is not allowed: write /node/path:/mount/path`},
		{func(s *Spec) { s.HostPaths = []string{"data:/data"} }, `-v/--volume "data:/data" is not allowed`},
		{func(s *Spec) { s.GPUs, s.LargeSHM = "0.5", true }, "--large-shm with a slice of a GPU"},
		{func(s *Spec) { s.GPUMemory, s.LargeSHM = "10Gi", true }, "--large-shm with a slice of a GPU"},
		{func(s *Spec) { s.RunAs = &RunAs{UID: -1} }, "--run-as-user"},
	} {
		s := base()
		c.change(&s)
		if _, err := s.Objects(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", s, err, c.want)
		}
	}
	// --large-shm with no GPU, or whole ones, is the usual memory emptyDir.
	s = base()
	s.LargeSHM = true
	if _, err := s.Objects(); err != nil {
		t.Error(err)
	}
}
