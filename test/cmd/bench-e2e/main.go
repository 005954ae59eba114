// Command bench-e2e measures the Kairos bootstrap manager against Cluster API's kubeadm
// bootstrap manager (CABPK) and the write floor, as real processes against one local
// kube-apiserver, and prints the comparison table (`make bench-e2e`; see the README's
// "Reading make bench-e2e").
//
//	go run ./cmd/bench-e2e [-n 200] [-providers kairos,cabpk,floor] [-sync-period 30s]
//	                       [-unrelated-secrets 5000] [-json out.json] [-keep]
//
// BENCH_N sets the default of -n. `bench-e2e floor ...` runs the write floor itself; the
// benchmark starts it that way as a child process.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kairos-capi/kairos-capi/test/bench/e2e"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == e2e.FloorCommand {
		if err := e2e.FloorMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "write floor:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-e2e:", err)
		os.Exit(1)
	}
}

func run() error {
	defaultN := 200
	if v := os.Getenv("BENCH_N"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("BENCH_N=%q: %w", v, err)
		}
		defaultN = n
	}
	n := flag.Int("n", defaultN, "worker configs per provider (default from BENCH_N, else 200)")
	providers := flag.String("providers", "kairos,cabpk,floor", "providers to run, in order: kairos, cabpk, floor")
	syncPeriod := flag.Duration("sync-period", 30*time.Second, "--sync-period of the restarted manager for the resync window (0 skips it)")
	unrelated := flag.Int("unrelated-secrets", 5000, "unrelated Secrets created to measure memory growth (0 skips it)")
	jsonOut := flag.String("json", "", "also write the raw results to this file")
	keep := flag.Bool("keep", false, "keep the work folder (binaries, kubeconfigs, manager logs)")
	verbose := flag.Bool("v", true, "report progress on stderr")
	flag.Parse()

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this executable for the write floor: %w", err)
	}
	o := e2e.Options{
		N:                *n,
		SyncPeriod:       *syncPeriod,
		UnrelatedSecrets: *unrelated,
		FloorCommand:     []string{self, e2e.FloorCommand},
		KeepWorkDir:      *keep,
	}
	for _, p := range strings.Split(*providers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.Providers = append(o.Providers, e2e.Provider(p))
		}
	}
	if *verbose {
		logger := log.New(os.Stderr, "bench-e2e: ", log.Ltime)
		o.Logf = logger.Printf
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	res, err := e2e.Run(ctx, o)
	if res != nil && len(res.Runs) > 0 {
		fmt.Println()
		res.WriteTable(os.Stdout)
		res.WriteDetails(os.Stdout)
		if *jsonOut != "" {
			data, jerr := json.MarshalIndent(res, "", "  ")
			if jerr == nil {
				jerr = os.WriteFile(*jsonOut, data, 0o644)
			}
			if jerr != nil {
				return fmt.Errorf("writing %s: %w", *jsonOut, jerr)
			}
		}
	}
	if err != nil {
		return err
	}
	if problems := res.Problems(); len(problems) > 0 {
		return fmt.Errorf("%d correctness problems:\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	return nil
}
