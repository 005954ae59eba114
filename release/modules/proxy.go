package modules

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// WriteProxy writes every published module of the list, as its folder under root holds it
// now and at its listed version, into dir as a file-based module proxy: what GOPROXY=file://dir
// serves to the go command once the tags are pushed, without pushing them.
func WriteProxy(dir, root string, l *List, t time.Time) error {
	for _, m := range l.Modules {
		if !m.Published {
			continue
		}
		src := filepath.Join(root, filepath.FromSlash(m.Folder))
		if err := AddToProxy(dir, module.Version{Path: m.Path, Version: m.Version}, src, t); err != nil {
			return err
		}
	}
	return nil
}

// AddToProxy writes version mv of a module, made from the module folder src, into the
// file-based module proxy dir, in the layout of the GOPROXY protocol
// (https://go.dev/ref/mod#goproxy-protocol): <escaped path>/@v/list, <version>.info,
// <version>.mod and <version>.zip. The zip is made by golang.org/x/mod/zip.CreateFromDir,
// the code the go command uses: it leaves out nested modules (bootstrap/api inside
// bootstrap), vendor folders and VCS folders, and enforces the module zip limits.
func AddToProxy(dir string, mv module.Version, src string, t time.Time) error {
	escPath, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(mv.Version)
	if err != nil {
		return err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(vdir, escVersion)

	gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		return fmt.Errorf("module %s: %w", mv.Path, err)
	}
	if err := os.WriteFile(base+".mod", gomod, 0o644); err != nil {
		return err
	}

	z, err := os.Create(base + ".zip")
	if err != nil {
		return err
	}
	if err := zip.CreateFromDir(z, mv, src); err != nil {
		z.Close()
		return fmt.Errorf("module %s: %w", mv, err)
	}
	if err := z.Close(); err != nil {
		return err
	}

	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{mv.Version, t.UTC()})
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".info", info, 0o644); err != nil {
		return err
	}

	listFile := filepath.Join(vdir, "list")
	list, err := os.ReadFile(listFile)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	versions := strings.Fields(string(list))
	if !slices.Contains(versions, mv.Version) {
		versions = append(versions, mv.Version)
	}
	return os.WriteFile(listFile, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}
