package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Eventually polls check until it returns nil or timeout passes, then fails the test with the
// last error, so that a failure says what was still wrong.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	if err := Poll(timeout, check); err != nil {
		t.Fatal(err)
	}
}

// Poll calls check until it returns nil or timeout passes, and returns the last error then.
// The interval starts at 200 ms and doubles up to a second: most waits are for states seconds or
// minutes away, and with six lifecycle scenarios reading the management API server five times a
// second each, the tests' own reads were a third of its requests. A state that lasts only
// moments is not for Poll: watch it (harness.Observe).
func Poll(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for interval := pollInterval; ; interval = min(2*interval, maxPollInterval) {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still failing after %s: %w", timeout, err)
		}
		time.Sleep(interval)
	}
}

const (
	pollInterval    = 200 * time.Millisecond
	maxPollInterval = time.Second
)

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

// Logger returns the logger of the controllers under test: silent unless KAIROS_TEST_LOG is set
// or a LogCapture runs, so that test output stays readable while a failing run can be repeated
// with full logs. All loggers it returns share one level and one output, switched at run time.
func Logger() logr.Logger {
	logSink.once.Do(func() {
		if os.Getenv("KAIROS_TEST_LOG") != "" {
			logSink.level.SetLevel(zapcore.DebugLevel)
		}
	})
	return zap.New(zap.UseDevMode(true), zap.WriteTo(&logSink), zap.Level(logSink.level))
}

// logSink is where every Logger writes: stderr with KAIROS_TEST_LOG, and the running capture.
var logSink = sharedLogSink{level: uberzap.NewAtomicLevelAt(zapcore.FatalLevel + 1)}

type sharedLogSink struct {
	once  sync.Once
	level uberzap.AtomicLevel
	mu    sync.Mutex
	// captures are the running LogCaptures' buffers: tests running side by side each get every
	// line (they share the controllers, whose logs name no test).
	captures map[*bytes.Buffer]struct{}
}

func (s *sharedLogSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for b := range s.captures {
		b.Write(p)
	}
	if os.Getenv("KAIROS_TEST_LOG") != "" {
		return os.Stderr.Write(p)
	}
	return len(p), nil
}

// LogCapture records everything the controllers log, at every verbosity, until Stop.
type LogCapture struct{ buf bytes.Buffer }

// captureVerbosity is the most detailed level a capture records: V(7). From V(8) on, client-go
// logs the bodies of HTTP requests and responses by design (kubectl's --v=8 "display HTTP
// request contents"), in every controller that uses it, whatever the objects hold.
const captureVerbosity = 7

// CaptureLogs starts recording every log line of every Logger up to V(7): tests that check what
// controllers never log (secret material) read it with Stop.
func CaptureLogs() *LogCapture {
	Logger() // initialize the level
	c := &LogCapture{}
	logSink.mu.Lock()
	defer logSink.mu.Unlock()
	if logSink.captures == nil {
		logSink.captures = map[*bytes.Buffer]struct{}{}
	}
	logSink.captures[&c.buf] = struct{}{}
	// logr's V(n) is zap level -n.
	logSink.level.SetLevel(zapcore.Level(-captureVerbosity))
	return c
}

// Stop ends the capture and returns what was logged; the level goes back once no capture runs.
func (c *LogCapture) Stop() string {
	logSink.mu.Lock()
	defer logSink.mu.Unlock()
	delete(logSink.captures, &c.buf)
	switch {
	case len(logSink.captures) > 0:
	case os.Getenv("KAIROS_TEST_LOG") != "":
		logSink.level.SetLevel(zapcore.DebugLevel)
	default:
		logSink.level.SetLevel(zapcore.FatalLevel + 1)
	}
	return c.buf.String()
}
