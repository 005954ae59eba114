package cloudconfig

import (
	"os"
	"path/filepath"
	"testing"
)

// goldenDir holds the documents the renderer of the common module is
// expected to produce.
const goldenDir = "../../common/render/testdata/golden"

// TestGoldens runs Check on every golden document of the renderer. It fails
// when there is none: a missing directory must not pass silently.
func TestGoldens(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no golden documents in %s", goldenDir)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			doc, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := Check(doc); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		})
	}
}
