// Command bench-fleet measures what the Kairos control-plane and bootstrap managers cost per
// single-node workload cluster in steady state (issue 35; `make bench-fleet`): for each N, a
// management API server, Cluster API core, both managers as processes at their default flags,
// and N simulated clusters (test/fleet), all on this machine. See test/bench/fleet.
//
//	go run ./cmd/bench-fleet [-n "250 500 1000"] [-distribution k0s|k3s|mixed]
//	                         [-sync-period 0] [-window 0] [-out DIR] [-keep] [-first-node-address 127.102.0.1]
//
// FLEET_N sets the default of -n. -sync-period passes --sync-period to both managers (0 keeps
// their default, which is what the issue asks for; the table says which was used); -window is
// the measurement window (default 1.1 × the sync period + 15 s, at least one full resync).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	fleetbench "github.com/kairos-capi/kairos-capi/test/bench/fleet"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-fleet:", err)
		os.Exit(1)
	}
}

func run() error {
	defaultN := os.Getenv("FLEET_N")
	if defaultN == "" {
		defaultN = "250 500 1000"
	}
	ns := flag.String("n", defaultN, "numbers of clusters, one run each (default from FLEET_N)")
	dist := flag.String("distribution", "k0s", "distribution of the clusters: k0s, k3s or mixed")
	syncPeriod := flag.Duration("sync-period", 0, "--sync-period given to both managers (0: their default, as issue 35 asks; anything else is printed with the results)")
	window := flag.Duration("window", 0, "steady-state measurement window (0: 1.1 × the sync period + 15 s)")
	out := flag.String("out", "", "results folder (default <repo>/bin/bench-fleet/<UTC time>)")
	firstNode := flag.String("first-node-address", "127.102.0.1", "first simulated node's address (each node's etcd listens at its own loopback address, port 2379; two benchmarks at once need separate ranges)")
	keep := flag.Bool("keep", false, "keep each run's work folder (binaries, kubeconfigs, manager logs, request traces)")
	flag.Parse()

	var sizes []int
	for _, f := range strings.Fields(strings.ReplaceAll(*ns, ",", " ")) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return fmt.Errorf("-n: %q is not a positive number", f)
		}
		sizes = append(sizes, n)
	}
	if len(sizes) == 0 {
		return fmt.Errorf("-n: no sizes")
	}
	firstNodeAddr, err := netip.ParseAddr(*firstNode)
	if err != nil {
		return fmt.Errorf("-first-node-address: %w", err)
	}
	if *out == "" {
		root, err := framework.RepoRoot()
		if err != nil {
			return err
		}
		*out = filepath.Join(root, "bin", "bench-fleet", time.Now().UTC().Format("20060102T150405Z"))
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	logger := log.New(os.Stderr, "bench-fleet: ", log.Ltime)
	logger.Printf("results go to %s", *out)

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var results []*fleetbench.Result
	var failed []string
	for _, n := range sizes {
		logger.Printf("N=%d", n)
		res, err := fleetbench.Run(ctx, fleetbench.Options{
			N: n, Distribution: *dist, SyncPeriod: *syncPeriod, Window: *window, KeepWorkDir: *keep, FirstNodeAddress: firstNodeAddr,
			Logf: func(format string, args ...any) { logger.Printf(fmt.Sprintf("N=%d: ", n)+format, args...) },
		})
		if res != nil {
			results = append(results, res)
			if err := write(*out, results); err != nil {
				return err
			}
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("N=%d: %v", n, err))
			break
		}
		if len(res.Problems) > 0 {
			failed = append(failed, fmt.Sprintf("N=%d: %d problems", n, len(res.Problems)))
		}
	}
	fmt.Println()
	fleetbench.WriteTable(os.Stdout, results)
	fleetbench.WriteDetails(os.Stdout, results)
	fmt.Printf("written to %s/results.md and results.json\n", *out)
	if len(failed) > 0 {
		return fmt.Errorf("%s", strings.Join(failed, "; "))
	}
	return nil
}

// write saves the results so far, as markdown and JSON.
func write(dir string, results []*fleetbench.Result) error {
	f, err := os.Create(filepath.Join(dir, "results.md"))
	if err != nil {
		return err
	}
	defer f.Close()
	var w io.Writer = f
	fmt.Fprintf(w, "# make bench-fleet, %s\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "Command: %s\n\n", strings.Join(os.Args, " "))
	fleetbench.WriteTable(w, results)
	fleetbench.WriteDetails(w, results)
	data, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.json"), data, 0o644)
}
