package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Sample is one sample of a Prometheus text exposition: a metric name, its labels and value.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Scrape reads a manager's metrics endpoint (served without authentication: the managers run
// with --insecure-diagnostics, so that scraping does not itself make TokenReview and
// SubjectAccessReview requests to the API server, which the proxy would count as writes).
func Scrape(ctx context.Context, url string) ([]Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	var out []Sample
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if s, ok := parseSample(sc.Text()); ok {
			out = append(out, s)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading metrics from %s: %w", url, err)
	}
	return out, nil
}

// parseSample parses one line of the text format: name{k="v",...} value [timestamp]. Comments
// and malformed lines are skipped. Label values here (controller names, hosts, status codes)
// contain no escaped quotes, so a simple split is enough.
func parseSample(line string) (Sample, bool) {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return Sample{}, false
	}
	s := Sample{Labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(line, "{ "); i < 0 {
		return Sample{}, false
	} else {
		s.Name = line[:i]
		rest = line[i:]
	}
	if strings.HasPrefix(rest, "{") {
		end := strings.Index(rest, "}")
		if end < 0 {
			return Sample{}, false
		}
		for _, kv := range strings.Split(rest[1:end], ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			s.Labels[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
		}
		rest = rest[end+1:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return Sample{}, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return Sample{}, false
	}
	s.Value = v
	return s, true
}

// Sum adds the values of the samples named name whose labels match every entry of match.
func Sum(samples []Sample, name string, match func(labels map[string]string) bool) float64 {
	var total float64
	for _, s := range samples {
		if s.Name == name && (match == nil || match(s.Labels)) {
			total += s.Value
		}
	}
	return total
}

// Reconciles is controller-runtime's count of reconciles of one controller, whatever their result.
func Reconciles(samples []Sample, controller string) int {
	return int(Sum(samples, "controller_runtime_reconcile_total", func(l map[string]string) bool {
		return l["controller"] == controller
	}))
}

// ReconcileResults splits a controller's reconciles by result (success, error, requeue,
// requeue_after).
func ReconcileResults(samples []Sample, controller string) map[string]int {
	out := map[string]int{}
	for _, s := range samples {
		if s.Name == "controller_runtime_reconcile_total" && s.Labels["controller"] == controller && s.Value > 0 {
			out[s.Labels["result"]] += int(s.Value)
		}
	}
	return out
}

// ClientWrites is client-go's own count of the mutating requests it sent to host
// (rest_client_requests_total by method), the cross-check of the proxy's count.
func ClientWrites(samples []Sample, host string) int {
	return ClientRequests(samples, func(h string) bool { return h == host }, true)
}

// ClientRequests is client-go's own count of the requests it sent to the hosts hosts accepts,
// only the mutating ones with writes.
func ClientRequests(samples []Sample, hosts func(string) bool, writes bool) int {
	return int(Sum(samples, "rest_client_requests_total", func(l map[string]string) bool {
		if !hosts(l["host"]) {
			return false
		}
		switch l["method"] {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			return true
		}
		return !writes
	}))
}

// RSS returns the resident set size of a process in bytes, from /proc.
func RSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the memory of process %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("unexpected VmRSS line %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing VmRSS %q: %w", line, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// CPUSeconds is a process' user and system CPU time so far (/proc/<pid>/stat, fields 14 and
// 15, in clock ticks of 1/100 s: USER_HZ is 100 on every Linux architecture Go supports).
func CPUSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: count from after it.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(ut+st) / 100, nil
}
