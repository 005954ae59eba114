package framework_test

import (
	"strings"
	"testing"

	"github.com/kairos-capi/kairos-capi/test/framework"
)

// A capture records lines up to V(7) from loggers made before it started, and nothing after it
// stopped.
func TestCaptureLogs(t *testing.T) {
	log := framework.Logger().WithName("capture-test")
	log.Info("before the capture")
	c := framework.CaptureLogs()
	log.V(7).Info("deep debug line", "key", "value")
	log.V(8).Info("HTTP bodies line")
	log.Error(nil, "an error line")
	got := c.Stop()
	log.Info("after the capture")
	for _, want := range []string{"deep debug line", "an error line", "capture-test"} {
		if !strings.Contains(got, want) {
			t.Errorf("capture lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"before the capture", "after the capture", "HTTP bodies line"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("capture has %q", unwanted)
		}
	}
}

// Captures running side by side (parallel tests) each get every line; stopping one leaves the
// other recording at its level.
func TestOverlappingCaptures(t *testing.T) {
	log := framework.Logger().WithName("overlap-test")
	first := framework.CaptureLogs()
	second := framework.CaptureLogs()
	log.V(7).Info("both see this")
	gotFirst := first.Stop()
	log.V(7).Info("only the second sees this")
	gotSecond := second.Stop()
	if !strings.Contains(gotFirst, "both see this") || strings.Contains(gotFirst, "only the second") {
		t.Errorf("first capture:\n%s", gotFirst)
	}
	if !strings.Contains(gotSecond, "both see this") || !strings.Contains(gotSecond, "only the second sees this") {
		t.Errorf("second capture:\n%s", gotSecond)
	}
}
