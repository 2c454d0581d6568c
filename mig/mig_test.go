package mig

import (
	"slices"
	"testing"
)

func TestProductsFindTheirGeometry(t *testing.T) {
	for _, c := range []struct {
		product string
		memory  int64
		want    string
		names   []string
	}{
		{"NVIDIA-A100-SXM4-40GB", 0, "A100-40GB", []string{"1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}},
		{"NVIDIA A100-SXM4-80GB", 0, "A100-80GB", []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
		{"NVIDIA-H100-80GB-HBM3", 0, "H100-80GB", nil},
		{"NVIDIA H200", 143771 << 20, "H200-141GB", []string{"1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}},
		{"NVIDIA A30", 0, "A30-24GB", []string{"1g.6gb", "2g.12gb", "4g.24gb"}},
	} {
		m, ok := ForProduct(c.product, c.memory)
		if !ok || m.Name != c.want {
			t.Errorf("%s: got %v %v, want %s", c.product, m, ok, c.want)
			continue
		}
		if c.names != nil && !slices.Equal(m.Names(), c.names) {
			t.Errorf("%s: profiles %v, want %v", c.product, m.Names(), c.names)
		}
	}
	if _, ok := ForProduct("Tesla-T4", 0); ok {
		t.Error("a T4 has no MIG")
	}
}

func TestPlacementsAreTheGuidesOnly(t *testing.T) {
	m, _ := ByName("A100-80GB")
	p3, _ := m.Profile("3g.40gb")
	p2, _ := m.Profile("2g.20gb")
	p1, _ := m.Profile("1g.10gb+me")
	l := Layout{{p3, 0}}
	if err := m.Valid(l, p3, 2); err == nil {
		t.Error("3g at slice 2 is not a placement the A100 has")
	}
	if err := m.Valid(l, p2, 2); err == nil {
		t.Error("2g at slice 2 overlaps the 3g at 0")
	}
	if err := m.Valid(l, p2, 4); err != nil {
		t.Error(err)
	}
	l = append(l, Placed{p2, 4})
	if err := m.Valid(l, p1, 6); err != nil {
		t.Error(err)
	}
	// A 3g at 0, a 2g at 4 and a 1g at 6 leave only memory slice 7 free.
	if got := append(l, Placed{p1, 6}).Mask(); got != Mask(0b01111111) {
		t.Errorf("mask %08b, want 01111111", got)
	}
}

func TestAOneGAtTheEndKeepsTheLargeProfilesPossible(t *testing.T) {
	m, _ := ByName("A100-80GB")
	p1, _ := m.Profile("1g.10gb")
	atEnd, atStart := p1.Mask(6), p1.Mask(0)
	if !m.Better(atEnd, atStart) {
		t.Errorf("a 1g at slice 6 leaves %v, at 0 leaves %v: the 4g is possible only with the first", m.Room(atEnd), m.Room(atStart))
	}
	if got := m.Room(0); !slices.Equal(got, []int{7, 4, 3, 2, 1, 1}) {
		t.Errorf("an empty A100 has room for %v", got)
	}
}

func TestSmallestProfileHolding(t *testing.T) {
	m, _ := ByName("A100-80GB")
	for _, c := range []struct {
		compute, mem int64
		want         string
	}{
		{500, 500, "4g.40gb"},
		{100, 100, "1g.10gb"},
		{100, 200, "1g.20gb"},
		{250, 250, "2g.20gb"},
		{400, 400, "3g.40gb"},
		{1000, 1000, "7g.80gb"},
	} {
		p, ok := m.Smallest(c.compute, c.mem)
		if !ok || p.Name != c.want {
			t.Errorf("%d/%d: got %v, want %s", c.compute, c.mem, p, c.want)
		}
	}
	if _, ok := m.Smallest(1001, 0); ok {
		t.Error("more than a GPU fits no profile")
	}
	if got := m.Share(&m.Profiles[0]); got != 142 {
		t.Errorf("a 1g counts %d thousandths, want 142", got)
	}
}

func TestProfileNames(t *testing.T) {
	if _, _, err := ParseName("big"); err == nil {
		t.Error("a bad profile name parses")
	}
}

// GPU Feature Discovery's product label under the device plugin's single strategy names
// the GPU and the profile of all its instances; the profile tells apart sizes the GPU's
// name does not.
func TestSingleStrategyProductsFindModelAndProfile(t *testing.T) {
	for _, c := range []struct {
		product, gpu, profile, model string
		memGB                        int64
	}{
		{"NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "NVIDIA-A100-SXM4-40GB", "1g.5gb", "A100-40GB", 40},
		{"NVIDIA-A100-80GB-PCIe-MIG-2g.20gb", "NVIDIA-A100-80GB-PCIe", "2g.20gb", "A100-80GB", 80},
		{"NVIDIA-A100-PCIE-40GB-MIG-3g.20gb", "NVIDIA-A100-PCIE-40GB", "3g.20gb", "A100-40GB", 40},
		{"NVIDIA-H100-PCIe-MIG-1g.10gb", "NVIDIA-H100-PCIe", "1g.10gb", "H100-80GB", 80},
		{"NVIDIA-H100-80GB-HBM3-MIG-1g.10gb+me", "NVIDIA-H100-80GB-HBM3", "1g.10gb+me", "H100-80GB", 80},
	} {
		gpu, profile, ok := SingleProduct(c.product)
		if !ok || gpu != c.gpu || profile != c.profile {
			t.Errorf("%s: got %q %q %v, want %q %q", c.product, gpu, profile, ok, c.gpu, c.profile)
			continue
		}
		m, p, ok := ForProfile(gpu, profile)
		if !ok || m.Name != c.model || p.Name != TrimMedia(c.profile) || m.Memory() != c.memGB<<30 {
			t.Errorf("%s: got %v %v %v", c.product, m, p, ok)
		}
	}
	for _, bad := range []string{"NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB-MIG-INVALID", "-MIG-1g.5gb", "NVIDIA-A100-SXM4-40GB-MIG-"} {
		if _, _, ok := SingleProduct(bad); ok {
			t.Errorf("%s read as a single-strategy product", bad)
		}
	}
	if _, _, ok := ForProfile("NVIDIA-A100-SXM4-40GB", "1g.20gb"); ok {
		t.Error("a 40GB A100 found with an 80GB profile")
	}
}
