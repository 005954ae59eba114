package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"

	"github.com/kairos-capi/kairos-capi/test/framework"
)

// capiModule is the module CABPK is built from; its version is the one the test module pins.
const capiModule = "sigs.k8s.io/cluster-api"

// cabpkPackage is CABPK's main package inside the cluster-api module.
const cabpkPackage = capiModule + "/bootstrap/kubeadm"

// BuildKairos builds our bootstrap manager from the work tree into dir.
func BuildKairos(dir string) (string, error) {
	bin, err := framework.BuildBinary("./bootstrap", dir, "kairos-bootstrap-manager")
	if err != nil {
		return "", fmt.Errorf("building the Kairos bootstrap manager: %w", err)
	}
	return bin, nil
}

// CAPIVersion returns the cluster-api version the test module pins.
func CAPIVersion() (string, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", capiModule)
	cmd.Dir = filepath.Join(root, "test")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("finding the pinned %s version: %w\n%s", capiModule, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// CacheDir is where built tools are kept between runs, next to the envtest binaries
// hack/envtest-assets.sh builds.
func CacheDir() (string, error) {
	if d := os.Getenv("KAIROS_CAPI_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding a cache folder: %w", err)
	}
	return filepath.Join(d, "kairos-capi"), nil
}

// BuildCABPK builds Cluster API's kubeadm bootstrap manager at version, unmodified, and caches
// the binary per version. It is built in a scratch module that requires only cluster-api at
// that version, so that its dependencies are exactly those cluster-api's release resolves to,
// not those our workspace would raise them to. Everything comes from the Go module proxy; no
// code of cluster-api is kept outside the module cache. logf reports the slow first build.
func BuildCABPK(version string, logf func(string, ...any)) (string, error) {
	root, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "bench", fmt.Sprintf("cabpk-%s-%s-%s", version, runtime.GOOS, runtime.GOARCH))
	bin := filepath.Join(dir, "cabpk-manager")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	logf("building CABPK %s from the module proxy (about 2 minutes the first time, cached in %s)", version, dir)
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", src, err)
	}
	// A tools file makes `go mod tidy` keep the main package's dependencies; its build tag
	// keeps it out of every build.
	tools := fmt.Sprintf("//go:build tools\n\npackage tools\n\nimport _ %q\n", cabpkPackage)
	if err := os.WriteFile(filepath.Join(src, "tools.go"), []byte(tools), 0o644); err != nil {
		return "", fmt.Errorf("writing the scratch module: %w", err)
	}
	_ = os.Remove(filepath.Join(src, "go.mod"))
	_ = os.Remove(filepath.Join(src, "go.sum"))
	steps := [][]string{
		{"go", "mod", "init", "kairos-capi-bench/cabpk"},
		// cluster-api replaces its api module with a local path, which a dependent module does
		// not inherit: require the api module at the same version explicitly.
		{"go", "get", capiModule + "@" + version, capiModule + "/api@" + version},
		{"go", "mod", "tidy"},
		{"go", "build", "-trimpath", "-o", bin + ".tmp", cabpkPackage},
	}
	for _, args := range steps {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = src
		// The scratch module stands alone: no workspace, dependencies resolved from the proxy.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("building CABPK %s: %s: %w\n%s", version, strings.Join(args, " "), err, out.String())
		}
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		return "", fmt.Errorf("installing the CABPK binary: %w", err)
	}
	return bin, nil
}

// Limits are a manager's client-side API limits (management and workload clusters) and its
// config reconciler's concurrency.
type Limits struct {
	QPS         float32 `json:"qps"`
	Burst       int     `json:"burst"`
	Concurrency int     `json:"concurrency"`
	// WorkloadQPS and WorkloadBurst limit each workload cluster's client (Cluster API's
	// --clustercache-client-qps and --clustercache-client-burst).
	WorkloadQPS   float32 `json:"workloadQPS"`
	WorkloadBurst int     `json:"workloadBurst"`
}

// DefaultLimits reads a manager binary's defaults for --kube-api-qps, --kube-api-burst and the
// named concurrency flag from its --help, so that the write floor follows whatever defaults the
// Kairos manager has today rather than a copy of them.
func DefaultLimits(bin, concurrencyFlag string) (Limits, error) {
	cmd := exec.Command(bin, "--help")
	// pflag prints the usage to stderr and exits 0 for --help (2 on some versions): keep both.
	out, _ := cmd.CombinedOutput()
	text := string(out)
	qps, err := flagDefault(text, "kube-api-qps")
	if err != nil {
		return Limits{}, err
	}
	burst, err := flagDefault(text, "kube-api-burst")
	if err != nil {
		return Limits{}, err
	}
	conc, err := flagDefault(text, concurrencyFlag)
	if err != nil {
		return Limits{}, err
	}
	wqps, err := flagDefault(text, "clustercache-client-qps")
	if err != nil {
		return Limits{}, err
	}
	wburst, err := flagDefault(text, "clustercache-client-burst")
	if err != nil {
		return Limits{}, err
	}
	return Limits{QPS: float32(qps), Burst: int(burst), Concurrency: int(conc), WorkloadQPS: float32(wqps), WorkloadBurst: int(wburst)}, nil
}

func flagDefault(help, name string) (float64, error) {
	re := regexp.MustCompile(`(?m)--` + regexp.QuoteMeta(name) + `\s.*\(default ([0-9.]+)\)\s*$`)
	m := re.FindStringSubmatch(help)
	if m == nil {
		return 0, fmt.Errorf("no default for --%s in the manager's --help", name)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("parsing the default of --%s: %w", name, err)
	}
	return v, nil
}
