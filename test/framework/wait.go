package framework

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Eventually polls check until it returns nil or timeout passes, then fails the test with the
// last error, so that a failure says what was still wrong.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %s: %v", timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Consistently checks that check keeps returning nil for the whole duration.
func Consistently(t testing.TB, duration time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(duration)
	for time.Now().Before(deadline) {
		if err := check(); err != nil {
			t.Fatalf("condition broke: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Context returns a context cancelled when the test ends.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// Logger returns the logger of the controllers under test: silent unless KAIROS_TEST_LOG is set,
// so that test output stays readable while a failing run can be repeated with full logs.
func Logger() logr.Logger {
	if os.Getenv("KAIROS_TEST_LOG") == "" {
		return logr.Discard()
	}
	return zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr))
}
