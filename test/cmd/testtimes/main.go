// Command testtimes reads the `go test -json` streams that `make test TEST_JSON_DIR=dir` keeps
// (one file per module) and prints how long each package took, the slowest tests, and the
// output of every test that failed. hack/test-times.sh runs make test that way and calls it;
// the README's table of test times comes from it.
//
//	go run ./cmd/testtimes [-top 10] dir/*.json
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

func main() {
	top := flag.Int("top", 10, "how many of the slowest tests to print")
	flag.Parse()
	var r report
	for _, f := range flag.Args() {
		file, err := os.Open(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			os.Exit(1)
		}
		err = r.read(file)
		_ = file.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "testtimes: %s: %v\n", f, err)
			os.Exit(1)
		}
	}
	r.print(os.Stdout, *top)
	if len(r.failed) > 0 {
		os.Exit(1)
	}
}

// event is a line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// timing is how long a package or a test took, in go test's own measure (a parallel test's
// time excludes its wait for a slot of go test), less the wait for a slot of a package's own
// scheduler that the test logged (slotWait: framework.Scheduler's tests).
type timing struct {
	name    string
	elapsed time.Duration
}

type report struct {
	packages []timing
	tests    []timing
	// failed are the tests and packages that failed, with their output, in the order they failed.
	failed []failure
	// output of every test (and package) until it ends, to print the failures' output.
	output map[string]*strings.Builder
	// waited is the slot wait each running test logged.
	waited map[string]time.Duration
}

// slotWait is what framework.Scheduler.Parallel logs when a test waited for a slot.
var slotWait = regexp.MustCompile(`waited ([0-9.]+s) for a scenario slot`)

type failure struct{ name, output string }

func (r *report) read(in io.Reader) error {
	if r.output == nil {
		r.output = map[string]*strings.Builder{}
		r.waited = map[string]time.Duration{}
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1024*1024), 64*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue // go's own messages (downloads, build errors before any test)
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("%q: %w", line, err)
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output", "build-output":
			b := r.output[key]
			if b == nil {
				b = &strings.Builder{}
				r.output[key] = b
			}
			b.WriteString(e.Output)
			if m := slotWait.FindStringSubmatch(e.Output); m != nil {
				if d, err := time.ParseDuration(m[1]); err == nil {
					r.waited[key] += d
				}
			}
		case "pass", "fail":
			d := time.Duration(e.Elapsed*float64(time.Second)) - r.waited[key]
			name := e.Package
			if e.Test != "" {
				name += " " + e.Test
			}
			if e.Test == "" {
				r.packages = append(r.packages, timing{name: name, elapsed: d})
			} else {
				r.tests = append(r.tests, timing{name: name, elapsed: d})
			}
			if e.Action == "fail" {
				f := failure{name: name}
				if b := r.output[key]; b != nil {
					f.output = b.String()
				}
				r.failed = append(r.failed, f)
			}
			delete(r.output, key)
			delete(r.waited, key)
		}
	}
	return sc.Err()
}

// leaves are the tests without subtests: a test whose subtests run in parallel reports only
// the time its own function took (about nothing), and one whose subtests run in turn reports
// their sum, so only the leaves say how long something took.
func (r *report) leaves() []timing {
	parents := map[string]bool{}
	for _, t := range r.tests {
		if i := strings.LastIndex(t.name, "/"); i > strings.Index(t.name, " ") {
			parents[t.name[:i]] = true
		}
	}
	var out []timing
	for _, t := range r.tests {
		if !parents[t.name] {
			out = append(out, t)
		}
	}
	return out
}

func (r *report) print(w io.Writer, top int) {
	sort.SliceStable(r.packages, func(i, j int) bool { return r.packages[i].elapsed > r.packages[j].elapsed })
	tests := r.leaves()
	sort.SliceStable(tests, func(i, j int) bool { return tests[i].elapsed > tests[j].elapsed })
	var sum time.Duration
	fmt.Fprintln(w, "| package | seconds |\n|---|---|")
	for _, p := range r.packages {
		sum += p.elapsed
		if p.elapsed >= time.Second {
			fmt.Fprintf(w, "| %s | %.0f |\n", p.name, p.elapsed.Seconds())
		}
	}
	fmt.Fprintf(w, "| all %d packages | %.0f |\n\n", len(r.packages), sum.Seconds())
	fmt.Fprintf(w, "| slowest tests (of %d, subtests counted on their own) | seconds |\n|---|---|\n", len(tests))
	for i, t := range tests {
		if i == top {
			break
		}
		fmt.Fprintf(w, "| %s | %.0f |\n", t.name, t.elapsed.Seconds())
	}
	for _, f := range r.failed {
		fmt.Fprintf(w, "\nFAILED: %s\n%s", f.name, f.output)
	}
}
