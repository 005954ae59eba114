package framework

import (
	"bufio"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// AvailableCPUs is how many CPUs this process may use: the number of CPUs, or less when a CPU
// quota of its cgroup (or of a parent cgroup) says so, as on a CI machine with a share of a host
// or under ../shared/tools/slow-machine.sh. Go's own GOMAXPROCS follows the quota too since Go
// 1.25, but rounds it up and never goes below 2, so it cannot tell 1.3 CPUs from 2.
func AvailableCPUs() float64 {
	cpus := float64(runtime.NumCPU())
	if q, ok := cgroupQuota(); ok && q < cpus {
		return q
	}
	return cpus
}

// ScaledToCPUs scales a degree of parallelism measured on 2 CPUs to the CPUs this process has
// (AvailableCPUs), at least 1. The test packages that run scenarios side by side were sized on
// 2-core machines with the cores to themselves: with less CPU the same number of scenarios
// slows each of them down in proportion, until their waits (sized for one scenario's own work)
// run out; fewer side by side keep each one's pace, and the machine as busy.
func ScaledToCPUs(atTwo int) int {
	return max(1, int(math.Round(float64(atTwo)*AvailableCPUs()/2)))
}

// cgroupQuota reads the smallest CPU quota on this process's cgroup path, cgroup v2
// (cpu.max) or v1 (cpu.cfs_quota_us / cpu.cfs_period_us), from the cgroup up to the root.
func cgroupQuota() (float64, bool) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	best, found := math.Inf(1), false
	consider := func(q float64, ok bool) {
		if ok && q < best {
			best, found = q, true
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			for dir := filepath.Join("/sys/fs/cgroup", parts[2]); ; dir = filepath.Dir(dir) {
				consider(readCPUMax(filepath.Join(dir, "cpu.max")))
				if dir == "/sys/fs/cgroup" || dir == "/" {
					break
				}
			}
		case hasController(parts[1], "cpu"):
			root := "/sys/fs/cgroup/cpu"
			for dir := filepath.Join(root, parts[2]); ; dir = filepath.Dir(dir) {
				consider(readCFSQuota(dir))
				if dir == root || dir == "/" {
					break
				}
			}
		}
	}
	return best, found
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readCPUMax reads cgroup v2's "quota period" (or "max period": no quota).
func readCPUMax(path string) (float64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 || fields[0] == "max" {
		return 0, false
	}
	return ratio(fields[0], fields[1])
}

// readCFSQuota reads cgroup v1's quota and period (a quota of -1: none).
func readCFSQuota(dir string) (float64, bool) {
	q, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	if err != nil {
		return 0, false
	}
	p, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err != nil {
		return 0, false
	}
	return ratio(strings.TrimSpace(string(q)), strings.TrimSpace(string(p)))
}

func ratio(quota, period string) (float64, bool) {
	q, err1 := strconv.ParseFloat(quota, 64)
	p, err2 := strconv.ParseFloat(period, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, false
	}
	return q / p, true
}

// envtestStartTimeout bounds how long envtest waits for its etcd and API server to answer, and
// for the CRDs it installs to be served. controller-runtime's defaults (20 s and 10 s) are a few
// times what a fast idle machine needs, and were missed on a loaded one; the bound only has to
// catch a process that hangs, so it is generous.
const envtestStartTimeout = 3 * time.Minute

// Tuned sets what every envtest API server of the suite shares: the start and CRD timeouts
// (envtestStartTimeout, unless set), and no watch cache. Without its watch cache the API
// server serves every read and watch from etcd directly, as the storage contract allows: the
// same answers to each client, with lists always consistent. What it saves is CPU, which is what
// make test's time goes to (issue 32): measured on the lifecycle package (AMD EPYC, 2 cores),
// the management API server used 361 CPU-seconds instead of 392, and with the simulated
// clusters' API servers without theirs too (simnode) the package took 1583 CPU-seconds instead of
// 1814.
func Tuned(env *envtest.Environment) *envtest.Environment {
	if env.ControlPlaneStartTimeout == 0 {
		env.ControlPlaneStartTimeout = envtestStartTimeout
	}
	if env.CRDInstallOptions.MaxTime == 0 {
		env.CRDInstallOptions.MaxTime = envtestStartTimeout
	}
	env.ControlPlane.GetAPIServer().Configure().Set("watch-cache", "false")
	return env
}

// managementGOGC is the garbage collector's target (GOGC) of the management API servers, their
// etcd and the test process that starts them (which runs the providers' managers): 400 instead
// of Go's 100. These live for a whole test package and hold large heaps, so they collected
// often; with 24 GiB and a few of them at a time, memory is what this machine has to spare and
// CPU is what make test's time goes to (issue 32). Measured with perf over the whole lifecycle
// package (AMD EPYC, 2 cores): the management API server used 356 CPU-seconds instead of 424,
// the test binary 316 instead of 363. The simulated clusters' API servers and etcd members keep
// Go's default: they are short-lived, and a higher target only moved their time from the
// collector to page faults.
const managementGOGC = 400

// startMu serialises StartTuned's change of the process environment.
var startMu sync.Mutex

// StartTuned starts env, Tuned, with its etcd and API server (which take the environment of
// this process: envtest has no per-process one) and this process collecting garbage at
// managementGOGC, unless GOGC is set already.
func StartTuned(env *envtest.Environment) (*rest.Config, error) {
	Tuned(env)
	startMu.Lock()
	defer startMu.Unlock()
	if _, set := os.LookupEnv("GOGC"); set {
		return env.Start()
	}
	debug.SetGCPercent(managementGOGC)
	if err := os.Setenv("GOGC", strconv.Itoa(managementGOGC)); err != nil {
		return nil, err
	}
	defer func() { _ = os.Unsetenv("GOGC") }()
	return env.Start()
}
