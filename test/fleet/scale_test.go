package fleet

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// rssBytes reads the process's resident set size.
func rssBytes(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

// TestFleetOfAThousand starts 1,000 clusters (FLEET_N overrides), each with a Node, a Lease and
// three kube-system Secrets besides what a cluster starts with, and prints how long the start
// took and what each cluster costs in memory. Only correctness is asserted: every cluster
// answers with its own Node through its own kubeconfig (checked on a sample) and its etcd member
// listens; the numbers are printed for the benchmark's README, never compared.
func TestFleetOfAThousand(t *testing.T) {
	n := 1000
	if v := os.Getenv("FLEET_N"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	f := newFleet(t, 10, Options{})
	rss0, heap0 := rssBytes(t), heapInUse()
	start := time.Now()
	clusters := make([]*Cluster, 0, n)
	for i := range n {
		dist := K0s
		if i%2 == 1 {
			dist = K3s
		}
		c, err := f.Add(ClusterSpec{Namespace: "fleet", Name: fmt.Sprintf("site-%04d", i), Distribution: dist})
		require.NoError(t, err)
		for j := range 3 {
			require.NoError(t, c.Seed(t.Context(), &corev1.Secret{
				TypeMeta:   metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"},
				ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: fmt.Sprintf("bootstrap-token-%06d", j)},
				Type:       "bootstrap.kubernetes.io/token",
				Data: map[string][]byte{
					"token-id": []byte(fmt.Sprintf("%06d", j)), "token-secret": []byte("0123456789abcdef"),
					"usage-bootstrap-authentication": []byte("true"), "expiration": []byte("2030-01-01T00:00:00Z"),
				},
			}))
		}
		clusters = append(clusters, c)
	}
	elapsed := time.Since(start)
	rss1, heap1 := rssBytes(t), heapInUse()
	t.Logf("fleet: %d clusters started in %s (%.2f ms each)", n, elapsed.Round(time.Millisecond), float64(elapsed.Microseconds())/1000/float64(n))
	t.Logf("fleet: RSS %d MiB -> %d MiB: %d KiB per cluster; live Go heap+stacks %d KiB per cluster; %d goroutines",
		rss0>>20, rss1>>20, int64(rss1-rss0)/int64(n)>>10, int64(heap1-heap0)/int64(n)>>10, runtime.NumGoroutine())

	// A sample of clusters, each through its own kubeconfig: its own Node, its own secrets.
	sample := max(1, n/10)
	for i := 0; i < n; i += sample {
		c := clusters[i]
		cfg, err := c.RESTConfig()
		require.NoError(t, err)
		cl, err := client.New(cfg, client.Options{Scheme: testScheme(t)})
		require.NoError(t, err)
		nodes := &corev1.NodeList{}
		require.NoError(t, cl.List(t.Context(), nodes))
		require.Len(t, nodes.Items, 1)
		require.Equal(t, c.ProviderID(), nodes.Items[0].Spec.ProviderID)
		secrets := &corev1.SecretList{}
		require.NoError(t, cl.List(t.Context(), secrets, client.InNamespace("kube-system")))
		require.Len(t, secrets.Items, 3)
	}
	require.Len(t, f.Clusters(), n)

	// What the kubelets cost the simulation itself at steady state (a Lease write per node every
	// 10 s, a Node status every 5 minutes), nobody watching: the share of the machine the fleet
	// takes from the managers under test before they send a request.
	cpu0, wall0 := cpuTime(t), time.Now()
	time.Sleep(3 * time.Second)
	cpu, wall := cpuTime(t)-cpu0, time.Since(wall0)
	t.Logf("fleet: steady state, %d kubelets: %.1f ms of CPU per second (%.1f%% of one core)",
		n, float64(cpu.Microseconds())/1000/wall.Seconds(), 100*cpu.Seconds()/wall.Seconds())
	require.Zero(t, f.KubeletErrors())
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
