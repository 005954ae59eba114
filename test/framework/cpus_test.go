package framework

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCgroupQuotaFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for content, want := range map[string]float64{"130000 100000\n": 1.3, "max 100000\n": 0, "50000 100000": 0.5} {
		got, ok := readCPUMax(write("cpu.max", content))
		if ok != (want != 0) || got != want {
			t.Errorf("cpu.max %q: %v %v, want %v", content, got, ok, want)
		}
	}
	write("cpu.cfs_period_us", "100000\n")
	for content, want := range map[string]float64{"70000\n": 0.7, "-1\n": 0} {
		write("cpu.cfs_quota_us", content)
		got, ok := readCFSQuota(dir)
		if ok != (want != 0) || got != want {
			t.Errorf("cpu.cfs_quota_us %q: %v %v, want %v", content, got, ok, want)
		}
	}
	t.Logf("%.2f CPUs available: %d scenarios where 2 CPUs run 6", AvailableCPUs(), ScaledToCPUs(6))
	if n := ScaledToCPUs(6); n < 1 || float64(n) > 3*AvailableCPUs()+0.5 {
		t.Errorf("ScaledToCPUs(6) = %d with %.2f CPUs", n, AvailableCPUs())
	}
}
