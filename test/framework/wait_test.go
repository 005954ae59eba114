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
