package clusterctlrepo

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/kairos-capi/kairos-capi/release/repo"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// RecordedRelease is a provider release listed in release/releases.yaml: the version and the
// commit it was built from.
type RecordedRelease struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
}

// PreviousRelease returns the newest recorded release of a provider (repo.Bootstrap or
// repo.ControlPlane).
func PreviousRelease(p repo.Provider) (RecordedRelease, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return RecordedRelease{}, err
	}
	data, err := os.ReadFile(filepath.Join(root, "release", "releases.yaml"))
	if err != nil {
		return RecordedRelease{}, err
	}
	var all map[string][]RecordedRelease
	if err := yaml.UnmarshalStrict(data, &all); err != nil {
		return RecordedRelease{}, fmt.Errorf("release/releases.yaml: %w", err)
	}
	rels := all[p.Name]
	if len(rels) == 0 || rels[0].Version == "" || rels[0].Commit == "" {
		return RecordedRelease{}, fmt.Errorf("release/releases.yaml records no release of %s", p.Name)
	}
	return rels[0], nil
}

// HistoricRelease is a provider release built from git history.
type HistoricRelease struct {
	RecordedRelease
	// RepositoryDir is the release's clusterctl repository folder (<label>/<version>/ inside a
	// tree), built by that commit's own release module.
	RepositoryDir string
	// Binary is its manager, built from that commit with the version stamped as a release
	// build stamps it.
	Binary string
}

// BuildHistoricRelease builds a recorded release of a provider exactly as it was: the commit's
// tree is extracted from git (git archive: no worktree, nothing in this clone changes), and its
// manager binary and clusterctl repository folder are built with that tree's own go.work and
// release module. The result is cached per commit and version under the user cache directory
// (next to the envtest assets), so that only the first run on a machine pays for the builds.
//
// The commit must be in this clone's history: a shallow clone fails here, with the command that
// fetches what is missing.
func BuildHistoricRelease(p repo.Provider, rel RecordedRelease) (*HistoricRelease, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return nil, err
	}
	if v := os.Getenv("KAIROS_CAPI_CACHE"); v != "" {
		cache = v
	} else {
		cache = filepath.Join(cache, "kairos-capi")
	}
	dir := filepath.Join(cache, "releases", rel.Commit[:min(len(rel.Commit), 12)])
	out := &HistoricRelease{
		RecordedRelease: rel,
		RepositoryDir:   filepath.Join(dir, "repository", p.Label, rel.Version),
		Binary:          filepath.Join(dir, "bin", fmt.Sprintf("%s-manager-%s", p.Name, rel.Version)),
	}
	if fileExists(out.Binary) && fileExists(filepath.Join(out.RepositoryDir, "metadata.yaml")) {
		return out, nil
	}

	src := filepath.Join(dir, "src")
	if !fileExists(filepath.Join(src, ".extracted")) {
		if err := os.RemoveAll(src); err != nil {
			return nil, err
		}
		if err := extractCommit(root, rel.Commit, src); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(src, ".extracted"), nil, 0o644); err != nil {
			return nil, err
		}
	}
	// The tree's own go.work applies; nothing of this checkout's environment may override it.
	// -trimpath as in make test (the Makefile's GOFLAGS): the build then shares the build cache
	// with the test run's builds of the same packages, wherever the tree was extracted.
	env := append(os.Environ(), "GOWORK="+filepath.Join(src, "go.work"), "GOFLAGS=-trimpath")
	tmpBin := out.Binary + ".tmp"
	if err := run(filepath.Join(src, p.Name), env, "go", "build",
		"-ldflags", "-X main.version="+rel.Version+" -X main.commit="+rel.Commit, "-o", tmpBin, "."); err != nil {
		return nil, fmt.Errorf("building the %s manager %s from commit %s: %w", p.Name, rel.Version, rel.Commit, err)
	}
	repoTree := filepath.Join(dir, "repository")
	if err := run(filepath.Join(src, "release"), env, "go", "run", "./cmd/release",
		"-provider", p.Name, "-version", rel.Version, "-out", repoTree); err != nil {
		return nil, fmt.Errorf("building the clusterctl repository of %s %s from commit %s: %w", p.Name, rel.Version, rel.Commit, err)
	}
	return out, os.Rename(tmpBin, out.Binary)
}

// extractCommit writes the tree of a commit into dir.
func extractCommit(root, commit, dir string) error {
	if err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		return fmt.Errorf("commit %s (release/releases.yaml) is not in this clone's history (a shallow clone?): run 'git fetch --unshallow' or clone without --depth", commit)
	}
	cmd := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	extractErr := untar(stdout, dir)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %w\n%s", commit, err, stderr.String())
	}
	return extractErr
}

func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if strings.HasPrefix(name, "..") || filepath.IsAbs(name) {
			return fmt.Errorf("git archive: unexpected path %q", h.Name)
		}
		target := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755|0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, target); err != nil {
				return err
			}
		}
	}
}

func run(dir string, env []string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
