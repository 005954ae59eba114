package e2e

import (
	"fmt"
	"io"
	"runtime"
	"strings"
)

// metric is one row of the table: a value per provider, or ok=false where it does not apply.
type metric struct {
	title  string
	format string
	value  func(*Result, *ProviderResult) (float64, bool)
	// ratio says whether Kairos/CABPK and Kairos/floor are meaningful for the row.
	ratio bool
}

var metrics = []metric{
	{"seconds until all N configs are ready", "%.1f", func(_ *Result, p *ProviderResult) (float64, bool) {
		return p.Seconds, p.Ready > 0
	}, true},
	{"writes per config, management", "%.2f", func(r *Result, p *ProviderResult) (float64, bool) {
		return float64(p.Management.Writes) / float64(r.N), true
	}, true},
	{"writes per config, workload", "%.2f", func(r *Result, p *ProviderResult) (float64, bool) {
		return float64(p.Workload.Writes) / float64(r.N), true
	}, true},
	{"reconciles per config", "%.2f", func(r *Result, p *ProviderResult) (float64, bool) {
		return float64(p.Reconciles) / float64(r.N), p.Reconciles >= 0
	}, true},
	{"writes in the resync window", "%.0f", func(_ *Result, p *ProviderResult) (float64, bool) {
		if p.Resync == nil {
			return 0, false
		}
		return float64(p.Resync.Writes), true
	}, true},
	{"RSS growth, MiB", "%+.1f", func(_ *Result, p *ProviderResult) (float64, bool) {
		if p.Memory == nil {
			return 0, false
		}
		return float64(p.Memory.Growth()) / (1 << 20), true
	}, false},
}

// WriteTable prints the summary table (Markdown, so that it can be pasted into an issue) with
// the ratios Kairos/CABPK and Kairos/floor computed from this run's numbers.
func (r *Result) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "N=%d worker configs per provider, one kube-apiserver %s", r.N, r.KubeVersion)
	if r.SyncPeriod > 0 {
		fmt.Fprintf(w, "; resync window: restart with --sync-period=%s, count for %s", r.SyncPeriod, ResyncWindow(r.SyncPeriod))
	}
	if r.UnrelatedSecrets > 0 {
		fmt.Fprintf(w, "; memory: %d unrelated Secrets", r.UnrelatedSecrets)
	}
	fmt.Fprintf(w, "; load average %s at the start, %s at the end (%d cores)\n\n", r.Load[0], r.Load[1], runtime.NumCPU())

	header := []string{""}
	for _, p := range r.Runs {
		header = append(header, p.Name)
	}
	kairos, cabpk, floor := r.Get(Kairos), r.Get(CABPK), r.Get(Floor)
	withCABPK, withFloor := kairos != nil && cabpk != nil, kairos != nil && floor != nil
	if withCABPK {
		header = append(header, "Kairos / CABPK")
	}
	if withFloor {
		header = append(header, "Kairos / floor")
	}
	fmt.Fprintln(w, "| "+strings.Join(header, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat("---|", len(header)))
	for _, m := range metrics {
		row := []string{m.title}
		for _, p := range r.Runs {
			if v, ok := m.value(r, p); ok {
				row = append(row, fmt.Sprintf(m.format, v))
			} else {
				row = append(row, "–")
			}
		}
		ratio := func(other *ProviderResult) string {
			if !m.ratio {
				return "–"
			}
			a, okA := m.value(r, kairos)
			b, okB := m.value(r, other)
			return formatRatio(a, b, okA && okB)
		}
		if withCABPK {
			row = append(row, ratio(cabpk))
		}
		if withFloor {
			row = append(row, ratio(floor))
		}
		fmt.Fprintln(w, "| "+strings.Join(row, " | ")+" |")
	}
}

func formatRatio(a, b float64, ok bool) string {
	switch {
	case !ok:
		return "–"
	case a == 0 && b == 0:
		return "equal (0)"
	case b == 0:
		return "∞"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// WriteDetails prints, per provider, how it ran and where its writes went, with the managers'
// own client metrics next to the proxies' counts.
func (r *Result) WriteDetails(w io.Writer) {
	for _, p := range r.Runs {
		fmt.Fprintf(w, "\n%s\n", p.Name)
		fmt.Fprintf(w, "  binary: %s\n  args:   %s\n", p.Binary, strings.Join(p.Args, " "))
		if p.Limits.QPS > 0 {
			fmt.Fprintf(w, "  limits: kube-api-qps %g, burst %d, clustercache-client-qps %g, burst %d, concurrency %d (defaults of %s)\n",
				p.Limits.QPS, p.Limits.Burst, p.Limits.WorkloadQPS, p.Limits.WorkloadBurst, p.Limits.Concurrency,
				map[bool]string{true: "the binary", false: "the Kairos manager"}[p.spec.manager])
		}
		fmt.Fprintf(w, "  ready:  %d of %d in %.1f s\n", p.Ready, r.N, p.Seconds)
		if p.Reconciles >= 0 {
			fmt.Fprintf(w, "  reconciles of %s: %d %v\n", p.spec.controller, p.Reconciles, p.ReconcileResults)
		}
		for _, s := range []struct {
			name string
			side Side
		}{{"management", p.Management}, {"workload", p.Workload}} {
			fmt.Fprintf(w, "  %s API: %d writes, %d reads", s.name, s.side.Writes, s.side.Reads)
			if s.side.ClientWrites >= 0 {
				check := "agrees"
				if s.side.ClientWrites != s.side.Writes {
					check = "DISAGREES"
				}
				fmt.Fprintf(w, "; the manager's rest_client_requests_total counts %d writes (%s)", s.side.ClientWrites, check)
			}
			fmt.Fprintln(w)
			for _, c := range s.side.Breakdown {
				fmt.Fprintf(w, "    %6d  %s\n", c.N, c.What)
			}
		}
		if p.Resync != nil {
			fmt.Fprintf(w, "  resync window (--sync-period=%s, %s): %d writes, %d reconciles; before the first periodic resync could fire (%s): %d writes, %d reconciles; after: %d writes, %d reconciles\n",
				p.Resync.SyncPeriod, p.Resync.Window, p.Resync.Writes, p.Resync.Reconciles, p.Resync.SyncPeriod*9/10,
				p.Resync.StartupWrites, p.Resync.StartupReconciles, p.Resync.PeriodicWrites, p.Resync.Reconciles-p.Resync.StartupReconciles)
			for _, c := range p.Resync.Breakdown {
				fmt.Fprintf(w, "    %6d  %s\n", c.N, c.What)
			}
		}
		if p.Memory != nil {
			fmt.Fprintf(w, "  RSS: %.1f MiB before %d unrelated Secrets, %.1f MiB after\n",
				float64(p.Memory.Before)/(1<<20), p.Memory.Secrets, float64(p.Memory.After)/(1<<20))
		}
		for _, problem := range p.Problems {
			fmt.Fprintf(w, "  PROBLEM: %s\n", problem)
		}
	}
	if r.WorkDir != "" {
		fmt.Fprintf(w, "\nlogs and kubeconfigs: %s\n", r.WorkDir)
	}
}
