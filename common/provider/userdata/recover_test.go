package userdata

import (
	"strings"
	"testing"
)

// TestRenderPanicBecomesAnError: a panic inside rendering reaches the caller as an error.
func TestRenderPanicBecomesAnError(t *testing.T) {
	render := func() (err error) {
		defer recoverRender(&err)
		var m map[string]int
		m["boom"]++ // a nil-map write panics, as a renderer bug would
		return nil
	}
	err := render()
	if err == nil || !strings.Contains(err.Error(), "internal error of the Kairos renderer") {
		t.Fatalf("error = %v, want the renderer's internal error", err)
	}
}
