package main

import (
	"strings"
	"testing"
)

// A stream as go test -json writes it: two packages, a test with a subtest (only the subtest
// counts, less the 30 s it waited for a lifecycle scenario slot), a failure.
const stream = `go: downloading example.com/x v1.0.0
{"Action":"start","Package":"p/a"}
{"Action":"run","Package":"p/a","Test":"TestSlow"}
{"Action":"output","Package":"p/a","Test":"TestSlow","Output":"=== RUN   TestSlow\n"}
{"Action":"run","Package":"p/a","Test":"TestSlow/k0s"}
{"Action":"output","Package":"p/a","Test":"TestSlow/k0s","Output":"    schedule_test.go:58: waited 30.0s for a scenario slot\n"}
{"Action":"pass","Package":"p/a","Test":"TestSlow/k0s","Elapsed":90}
{"Action":"pass","Package":"p/a","Test":"TestSlow","Elapsed":95.4}
{"Action":"run","Package":"p/a","Test":"TestBroken"}
{"Action":"output","Package":"p/a","Test":"TestBroken","Output":"    broken_test.go:9: want 3, got 2\n"}
{"Action":"fail","Package":"p/a","Test":"TestBroken","Elapsed":1.5}
{"Action":"output","Package":"p/a","Output":"FAIL\n"}
{"Action":"fail","Package":"p/a","Elapsed":100}
{"Action":"run","Package":"p/b","Test":"TestQuick"}
{"Action":"pass","Package":"p/b","Test":"TestQuick","Elapsed":0.2}
{"Action":"pass","Package":"p/b","Elapsed":3}
`

func TestReport(t *testing.T) {
	var r report
	if err := r.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	r.print(&out, 2)
	want := `| package | seconds |
|---|---|
| p/a | 100 |
| p/b | 3 |
| all 2 packages | 103 |

| slowest tests (of 3, subtests counted on their own) | seconds |
|---|---|
| p/a TestSlow/k0s | 60 |
| p/a TestBroken | 2 |

FAILED: p/a TestBroken
    broken_test.go:9: want 3, got 2

FAILED: p/a
FAIL
`
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestReportRefusesBrokenJSON(t *testing.T) {
	var r report
	if err := r.read(strings.NewReader("{\"Action\":\n")); err == nil {
		t.Error("a broken event was accepted")
	}
}
