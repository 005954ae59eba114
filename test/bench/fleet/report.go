package fleetbench

import (
	"fmt"
	"io"
	"strings"
)

// WriteTable writes the results, one column per N, as a markdown table.
func WriteTable(w io.Writer, results []*Result) {
	if len(results) == 0 {
		return
	}
	r0 := results[0]
	how := "the managers' default"
	if r0.SyncPeriodFlag {
		how = "set by -sync-period (not the managers' default)"
	}
	fmt.Fprintf(w, "Sync period %s (%s); steady state measured over %s (%.2f resyncs) after every cluster was ready and %s\n",
		r0.SyncPeriod, how, r0.Window, r0.Resyncs, "no write had arrived for the quiet time")
	fmt.Fprintf(w, "Per cluster per resync = count in the window / N / (window / sync period). Workload requests are counted by the fleet, management requests by a proxy in front of each manager.\n\n")
	head := "| | " + strings.Join(mapResults(results, func(r *Result) string { return fmt.Sprintf("N=%d", r.N) }), " | ") + " |"
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, "|---|"+strings.Repeat("---:|", len(results)))
	row := func(label string, f func(r *Result) string) {
		fmt.Fprintf(w, "| %s | %s |\n", label, strings.Join(mapResults(results, f), " | "))
	}
	row("clusters ready / time to ready", func(r *Result) string { return fmt.Sprintf("%d / %.0f s", r.Ready, r.ReadySeconds) })
	for _, m := range Managers {
		row(string(m)+": CPU s/min", func(r *Result) string { return fmt.Sprintf("%.2f", r.CPUPerMinute(m)) })
		row(string(m)+": CPU millicores/cluster", func(r *Result) string {
			return fmt.Sprintf("%.3f", 1000*r.CPUPerMinute(m)/60/float64(r.N))
		})
		row(string(m)+": RSS MiB (KiB/cluster)", func(r *Result) string {
			ms := r.Managers[m]
			if ms == nil {
				return "-"
			}
			return fmt.Sprintf("%.0f (%.0f)", float64(ms.RSS)/(1<<20), float64(ms.RSS)/1024/float64(r.N))
		})
		row(string(m)+": reconciles/cluster/resync", func(r *Result) string {
			ms := r.Managers[m]
			if ms == nil {
				return "-"
			}
			return fmt.Sprintf("%.2f", r.PerClusterPerResync(float64(ms.Reconciles)))
		})
		row(string(m)+": mgmt writes/cluster/resync (leases)", func(r *Result) string {
			ms := r.Managers[m]
			if ms == nil {
				return "-"
			}
			return fmt.Sprintf("%.3f (%d)", r.PerClusterPerResync(float64(ms.Management.Writes-ms.ManagementLeases)), ms.ManagementLeases)
		})
		row(string(m)+": mgmt reads/cluster/resync", func(r *Result) string {
			ms := r.Managers[m]
			if ms == nil {
				return "-"
			}
			return fmt.Sprintf("%.3f", r.PerClusterPerResync(float64(ms.Management.Reads)))
		})
		row(string(m)+": workload writes (no-op)/cluster/resync", func(r *Result) string {
			ms := r.Managers[m]
			if ms == nil {
				return "-"
			}
			return fmt.Sprintf("%.3f (%.3f)", r.PerClusterPerResync(float64(ms.Workload.Writes)), r.PerClusterPerResync(float64(ms.Workload.NoOpWrites)))
		})
		row(string(m)+": workload reads besides health probes (probes)/cluster/resync", func(r *Result) string {
			ms := r.Managers[m]
			if ms == nil {
				return "-"
			}
			return fmt.Sprintf("%.3f (%.3f)", r.PerClusterPerResync(float64(ms.Workload.Reads-ms.Workload.Probes)), r.PerClusterPerResync(float64(ms.Workload.Probes)))
		})
	}
	row("etcd TLS handshakes (full ones)/member/resync", func(r *Result) string {
		return fmt.Sprintf("%.3f (%.3f)", r.PerClusterPerResync(float64(r.Etcd.Handshakes)), r.PerClusterPerResync(float64(r.Etcd.Handshakes-r.Etcd.Resumed)))
	})
	row("etcd calls/member/resync", func(r *Result) string { return fmt.Sprintf("%.3f", r.PerClusterPerResync(float64(r.Etcd.Calls))) })
	row("Cluster API core: workload reads besides health probes (probes)/cluster/resync", func(r *Result) string {
		return fmt.Sprintf("%.3f (%.3f)", r.PerClusterPerResync(float64(r.CAPIWorkload.Reads-r.CAPIWorkload.Probes)), r.PerClusterPerResync(float64(r.CAPIWorkload.Probes)))
	})
	row("load average (start / end of window)", func(r *Result) string { return r.Load[0] + " / " + r.Load[1] })
	row("problems", func(r *Result) string { return fmt.Sprintf("%d", len(r.Problems)) })
	fmt.Fprintln(w)
}

// WriteDetails writes what the table summarizes: breakdowns, the cross-checks, the problems.
func WriteDetails(w io.Writer, results []*Result) {
	for _, r := range results {
		fmt.Fprintf(w, "## N=%d (%s, %s)\n\n", r.N, r.Distribution, r.KubeVersion)
		for _, m := range Managers {
			ms := r.Managers[m]
			if ms == nil {
				continue
			}
			fmt.Fprintf(w, "%s manager, args: %s\n", m, strings.Join(ms.Args, " "))
			fmt.Fprintf(w, "  window: %d reconciles of %s; CPU %.2f s, RSS %.1f MiB; management %d writes (%d leases), %d reads; workload %d writes (%d no-op), %d reads (%d health probes), %d watches\n",
				ms.Reconciles, controllerName[m], ms.CPUSeconds, float64(ms.RSS)/(1<<20), ms.Management.Writes, ms.ManagementLeases, ms.Management.Reads,
				ms.Workload.Writes, ms.Workload.NoOpWrites, ms.Workload.Reads, ms.Workload.Probes, ms.Workload.Watches)
			for _, c := range ms.Management.Breakdown {
				fmt.Fprintf(w, "    management %-50s %d\n", c.What, c.N)
			}
			x := ms.WholeRun
			fmt.Fprintf(w, "  whole run, counted outside / by the manager (rest_client_requests_total): management writes %d / %d, workload writes %d / %d, workload requests %d / %d\n",
				x.ManagementWrites, x.ManagementClientWrites, x.WorkloadWrites, x.WorkloadClientWrites, x.WorkloadRequests, x.WorkloadClientRequests)
		}
		fmt.Fprintf(w, "etcd in the window: %d handshakes (%d resumed), %d calls over %d members\n", r.Etcd.Handshakes, r.Etcd.Resumed, r.Etcd.Calls, r.N)
		fmt.Fprintf(w, "Cluster API core in the window: workload %d reads, %d writes, %d watches\n", r.CAPIWorkload.Reads, r.CAPIWorkload.Writes, r.CAPIWorkload.Watches)
		fmt.Fprintf(w, "workload requests refused (401) over the run: %d\n", r.Unauthorized)
		for _, p := range r.Problems {
			fmt.Fprintf(w, "PROBLEM: %s\n", p)
		}
		if r.WorkDir != "" {
			fmt.Fprintf(w, "work folder (logs, request traces): %s\n", r.WorkDir)
		}
		fmt.Fprintln(w)
	}
}

func mapResults(results []*Result, f func(*Result) string) []string {
	out := make([]string, len(results))
	for i, r := range results {
		out[i] = f(r)
	}
	return out
}
