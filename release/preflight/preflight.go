// Package preflight checks a checkout before a provider release is built from it.
//
// The release runs goreleaser with --skip=validate, because the open-source goreleaser
// cannot parse the monorepo tag bootstrap/v0.2.0 and is given the bare version instead
// (GORELEASER_CURRENT_TAG=v0.2.0, which is not a tag here). goreleaser's validation would
// have refused a dirty tree and a tag that is not HEAD (internal/pipe/git in goreleaser
// v2.15.1: ErrDirty, ErrWrongRef); Check does that for the real tag, and also checks what
// makes the release's Go modules usable: release/modules.yaml lists the version, every
// go.mod matches the list, and the sibling modules the provider requires are tagged with
// the content the shipped binary is built from.
package preflight

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"

	"github.com/kairos-capi/kairos-capi/release/modules"
	"github.com/kairos-capi/kairos-capi/release/repo"
)

// Options selects the release to check.
type Options struct {
	// Root is the repository root: a git work tree with go.work.
	Root string
	// Provider is the provider being released; its module is the folder of its Name.
	Provider repo.Provider
	// Version is the release version, vX.Y.Z; the tag is Provider.Tag(Version).
	Version string
	// Git is the git command (default "git").
	Git string
}

// Error lists every failed check.
type Error struct {
	Tag      string
	Failures []string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s cannot be released from this checkout:", e.Tag)
	for _, f := range e.Failures {
		b.WriteString("\n  - ")
		b.WriteString(f)
	}
	return b.String()
}

// Check runs every check and returns HEAD's commit when all hold, otherwise an *Error
// naming each failure (or another error when git or a file cannot be read at all).
func Check(opts Options) (string, error) {
	if opts.Git == "" {
		opts.Git = "git"
	}
	p := opts.Provider
	tag := p.Tag(opts.Version)
	var failures []string
	fail := func(format string, args ...any) { failures = append(failures, fmt.Sprintf(format, args...)) }

	if _, err := repo.ParseVersion(opts.Version); err != nil {
		return "", err
	}
	g := git{bin: opts.Git, dir: opts.Root}

	head, err := g.commit("HEAD")
	if err != nil {
		return "", fmt.Errorf("reading HEAD: %w", err)
	}

	// The tag is the commit being released.
	switch tagged, err := g.commit("refs/tags/" + tag); {
	case errors.Is(err, errNoCommit):
		fail("tag %s does not exist: tag the commit being released (git tag %s) and run again from it", tag, tag)
	case err != nil:
		return "", err
	case tagged != head:
		fail("tag %s is commit %s, but HEAD is %s: check out the tag (git checkout %s)", tag, short(tagged), short(head), tag)
	}

	// The tree is that commit: nothing modified, staged or untracked (ignored files such as
	// out/ and dist/ do not count).
	status, err := g.run("status", "--porcelain", "--untracked-files=all")
	if err != nil {
		return "", err
	}
	if status = strings.TrimRight(status, "\n"); status != "" {
		lines := strings.Split(status, "\n")
		if len(lines) > 10 {
			lines = append(lines[:10], fmt.Sprintf("... and %d more", len(lines)-10))
		}
		fail("the tree is not clean, the release would not be what %s holds: commit or remove\n      %s", tag, strings.Join(lines, "\n      "))
	}

	// The modules: the list names this release, and every go.mod matches the list.
	l, err := modules.Load(opts.Root)
	var ce *modules.CheckError
	switch {
	case errors.As(err, &ce):
		for _, pr := range ce.Problems {
			fail("%s", pr)
		}
		return "", &Error{Tag: tag, Failures: failures}
	case err != nil:
		return "", err
	}
	self, ok := l.ByFolder(p.Name)
	switch {
	case !ok:
		fail("%s lists no module in folder %s", modules.File, p.Name)
	case self.Tag() != tag:
		fail("%s lists %s at %s, not %s: run `%s -set %s=%s`, commit, and tag that commit", modules.File, self.Path, self.Version, opts.Version, modules.ApplyCommand, p.Name, opts.Version)
	case !self.Published:
		fail("%s says %s is not published", modules.File, self.Path)
	}
	problems, err := modules.Check(opts.Root, l)
	if err != nil {
		return "", err
	}
	for _, pr := range problems {
		fail("%s", pr)
	}

	// The sibling modules the provider requires are released as the tree holds them: the
	// manager is built from the tree (replace directives), while a consumer of the tag gets
	// the siblings at their listed versions, so both must be the same code.
	if ok {
		deps, err := requiredModules(opts.Root, l, self)
		if err != nil {
			return "", err
		}
		for _, dep := range deps {
			depTag := dep.Tag()
			tagged, err := g.commit("refs/tags/" + depTag)
			if errors.Is(err, errNoCommit) {
				fail("%s requires %s %s, but tag %s does not exist: tag it (`%s` prints every tag to push)", self.Path, dep.Path, dep.Version, depTag, modules.ApplyCommand)
				continue
			}
			if err != nil {
				return "", err
			}
			changed, err := g.changed(tagged, head, dep.Folder, nestedFolders(l, dep))
			if err != nil {
				return "", err
			}
			if changed {
				fail("%s changed since %s (git diff %s HEAD -- %s): the manager would be built from code that %s does not hold; release it at a new version (`%s -set %s=vX.Y.Z`)",
					dep.Folder, depTag, depTag, dep.Folder, depTag, modules.ApplyCommand, dep.Folder)
			}
		}
	}

	if len(failures) > 0 {
		return "", &Error{Tag: tag, Failures: failures}
	}
	return head, nil
}

// requiredModules returns the listed modules self requires, directly or through other
// listed modules, in list order.
func requiredModules(root string, l *modules.List, self modules.Module) ([]modules.Module, error) {
	seen := map[string]bool{self.Path: true}
	queue := []modules.Module{self}
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		file := filepath.Join(root, filepath.FromSlash(m.Folder), "go.mod")
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(file, data, nil)
		if err != nil {
			return nil, err
		}
		for _, r := range f.Require {
			if dep, ok := l.ByPath(r.Mod.Path); ok && !seen[dep.Path] {
				seen[dep.Path] = true
				queue = append(queue, dep)
			}
		}
	}
	var out []modules.Module
	for _, m := range l.Modules {
		if seen[m.Path] && m.Path != self.Path {
			out = append(out, m)
		}
	}
	return out, nil
}

// nestedFolders returns the folders of the listed modules inside m's folder: they are not
// part of m (common/provider is not in common's module zip).
func nestedFolders(l *modules.List, m modules.Module) []string {
	var out []string
	for _, o := range l.Modules {
		if strings.HasPrefix(o.Folder, m.Folder+"/") {
			out = append(out, o.Folder)
		}
	}
	return out
}

var errNoCommit = errors.New("no such commit")

type git struct {
	bin, dir string
}

func (g git) run(args ...string) (string, error) {
	cmd := exec.Command(g.bin, args...)
	cmd.Dir = g.dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("git %s (in %s): %w: %s", strings.Join(args, " "), g.dir, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// commit resolves rev to a commit; errNoCommit when it names none.
func (g git) commit(rev string) (string, error) {
	cmd := exec.Command(g.bin, "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	cmd.Dir = g.dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 && stderr.Len() == 0 {
		return "", errNoCommit
	}
	if err != nil {
		return "", fmt.Errorf("git rev-parse %s (in %s): %w: %s", rev, g.dir, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// changed reports whether folder (without the excluded subfolders) differs between two
// commits.
func (g git) changed(from, to, folder string, exclude []string) (bool, error) {
	args := []string{"diff", "--quiet", from, to, "--", folder}
	for _, e := range exclude {
		args = append(args, ":(exclude)"+e)
	}
	cmd := exec.Command(g.bin, args...)
	cmd.Dir = g.dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return false, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return true, nil
	default:
		return false, fmt.Errorf("git %s (in %s): %w: %s", strings.Join(args, " "), g.dir, err, strings.TrimSpace(stderr.String()))
	}
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
