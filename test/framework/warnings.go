package framework

import (
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Warnings records the admission warnings an API server returns to one client.
type Warnings struct {
	mu   sync.Mutex
	list []string
}

// HandleWarningHeader implements rest.WarningHandler.
func (w *Warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// List returns the warnings recorded since the last Reset.
func (w *Warnings) List() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list...)
}

// Contain tells whether a recorded warning contains s.
func (w *Warnings) Contain(s string) bool {
	for _, l := range w.List() {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// Reset forgets the recorded warnings.
func (w *Warnings) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = nil
}

// WarningClient returns a client of the environment, with its scheme, that records warnings.
func (e *Environment) WarningClient(t testing.TB) (client.Client, *Warnings) {
	t.Helper()
	w := &Warnings{}
	cfg := rest.CopyConfig(e.Config)
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{Scheme: e.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}
