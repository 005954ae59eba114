package release

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeGitHub is the part of the GitHub REST API that goreleaser v2.15.1 uses to publish a
// release, for one repository, served over plain http. goreleaser reaches it through the
// github_urls config section (api: <URL>/api/v3/, upload: <URL>/api/uploads/), which
// internal/client/github.go newGitHub passes to go-github's Client.WithEnterpriseURLs (v84:
// it keeps paths already ending in /api/v3/ and /api/uploads/).
//
// The requests, from internal/pipe/release/release.go doPublish and internal/client/github.go
// (githubClient) of goreleaser v2.15.1, in order:
//
//   - GET  /api/v3/rate_limit, before nearly every call (checkRateLimit/rateLimitChecker; only
//     resources.core.remaining matters, a failure merely logs a warning);
//   - GET  /api/v3/repos/{owner}/{repo}/releases/tags/{tag} (CreateRelease ->
//     createOrUpdateRelease -> findRelease, GetReleaseByTag since use_existing_draft is unset):
//     404 here, as no release exists yet;
//   - POST /api/v3/repos/{owner}/{repo}/releases (createOrUpdateRelease: CreateRelease with
//     draft true, tag_name, name from release.name_template, body = the release notes);
//   - POST /api/uploads/repos/{owner}/{repo}/releases/{id}/assets?name=... once per artifact
//     (doPublish -> upload -> githubClient.Upload, UploadReleaseAsset; in parallel; the
//     release.extra_files become artifacts of type UploadableFile just before);
//   - PATCH /api/v3/repos/{owner}/{repo}/releases/{id} with draft false (PublishRelease ->
//     updateRelease, EditRelease) once every upload succeeded.
//
// Anything else (another repository, method or path, a second release, an asset uploaded
// twice, a missing token) fails the test and gets an error response.
type fakeGitHub struct {
	t           *testing.T
	owner, repo string
	token       string
	server      *httptest.Server

	mu       sync.Mutex
	requests []string // "METHOD path", in arrival order
	releases []*fakeRelease
}

type fakeRelease struct {
	ID int64
	// Created is what the POST that created the release carried.
	Created releaseJSON
	// TagName, Name, Body, Draft and Prerelease are the release's current state.
	TagName, Name, Body string
	Draft, Prerelease   bool
	// Assets are the uploaded files by name; Uploads lists the names in upload order.
	Assets  map[string][]byte
	Uploads []string
	// Edits are the bodies of the PATCH requests, in order, each with the number of
	// assets the release had when it arrived.
	Edits []releaseEdit
}

type releaseEdit struct {
	Fields       map[string]json.RawMessage
	AssetsBefore int
}

// releaseJSON holds the fields of go-github's RepositoryRelease that goreleaser sets.
type releaseJSON struct {
	TagName         string `json:"tag_name"`
	TargetCommitish string `json:"target_commitish,omitempty"`
	Name            string `json:"name"`
	Body            string `json:"body"`
	Draft           *bool  `json:"draft"`
	Prerelease      *bool  `json:"prerelease"`
	MakeLatest      string `json:"make_latest,omitempty"`
}

func newFakeGitHub(t *testing.T, owner, repo, token string) *fakeGitHub {
	f := &fakeGitHub{t: t, owner: owner, repo: repo, token: token}
	repoPath := "/repos/{owner}/{repo}/releases"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v3/rate_limit", f.rateLimit)
	mux.HandleFunc("GET /api/v3"+repoPath+"/tags/{tag}", f.releaseByTag)
	mux.HandleFunc("POST /api/v3"+repoPath, f.createRelease)
	mux.HandleFunc("PATCH /api/v3"+repoPath+"/{id}", f.editRelease)
	mux.HandleFunc("POST /api/uploads"+repoPath+"/{id}/assets", f.uploadAsset)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		f.fail(w, http.StatusNotImplemented, "unexpected request %s %s", r.Method, r.URL)
	})
	f.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.Path)
		f.mu.Unlock()
		// oauth2.StaticTokenSource in newGitHub: the token goes as a bearer token.
		if got := r.Header.Get("Authorization"); got != "Bearer "+f.token {
			f.fail(w, http.StatusUnauthorized, "%s %s: Authorization %q, want the GITHUB_TOKEN as bearer token", r.Method, r.URL, got)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.server.Close)
	return f
}

// urls is the github_urls config section pointing goreleaser at the fake.
func (f *fakeGitHub) urls() map[string]any {
	return map[string]any{
		"api":      f.server.URL + "/api/v3/",
		"upload":   f.server.URL + "/api/uploads/",
		"download": f.server.URL,
	}
}

// fail records an unexpected request as a test error and answers it with an error status
// (a GitHub-style JSON message), so that goreleaser fails too.
func (f *fakeGitHub) fail(w http.ResponseWriter, status int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.t.Errorf("fake GitHub: %s", msg)
	writeJSON(w, status, map[string]string{"message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// checkRepo fails requests for any repository but the fake's.
func (f *fakeGitHub) checkRepo(w http.ResponseWriter, r *http.Request) bool {
	if owner, repo := r.PathValue("owner"), r.PathValue("repo"); owner != f.owner || repo != f.repo {
		f.fail(w, http.StatusNotFound, "%s %s: repository %s/%s, want %s/%s", r.Method, r.URL, owner, repo, f.owner, f.repo)
		return false
	}
	return true
}

// release returns the release the {id} path value names; the caller holds f.mu.
func (f *fakeGitHub) release(w http.ResponseWriter, r *http.Request) *fakeRelease {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err == nil {
		for _, rel := range f.releases {
			if rel.ID == id {
				return rel
			}
		}
	}
	f.fail(w, http.StatusNotFound, "%s %s: no release %q", r.Method, r.URL, r.PathValue("id"))
	return nil
}

func (f *fakeGitHub) releaseResponse(rel *fakeRelease) map[string]any {
	html := fmt.Sprintf("%s/%s/%s/releases/tag/%s", f.server.URL, f.owner, f.repo, rel.TagName)
	return map[string]any{
		"id":         rel.ID,
		"tag_name":   rel.TagName,
		"name":       rel.Name,
		"body":       rel.Body,
		"draft":      rel.Draft,
		"prerelease": rel.Prerelease,
		"html_url":   html,
		"upload_url": fmt.Sprintf("%s/api/uploads/repos/%s/%s/releases/%d/assets{?name,label}", f.server.URL, f.owner, f.repo, rel.ID),
	}
}

func (f *fakeGitHub) rateLimit(w http.ResponseWriter, _ *http.Request) {
	rate := map[string]any{"limit": 5000, "remaining": 5000, "used": 0, "reset": time.Now().Add(time.Hour).Unix()}
	writeJSON(w, http.StatusOK, map[string]any{"resources": map[string]any{"core": rate, "search": rate}})
}

func (f *fakeGitHub) releaseByTag(w http.ResponseWriter, r *http.Request) {
	if !f.checkRepo(w, r) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, rel := range f.releases {
		if rel.TagName == r.PathValue("tag") {
			writeJSON(w, http.StatusOK, f.releaseResponse(rel))
			return
		}
	}
	writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found"})
}

func (f *fakeGitHub) createRelease(w http.ResponseWriter, r *http.Request) {
	if !f.checkRepo(w, r) {
		return
	}
	var req releaseJSON
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		f.fail(w, http.StatusBadRequest, "create release: %v", err)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.releases) > 0 {
		f.fail(w, http.StatusUnprocessableEntity, "create release %q: a release was created already (%q)", req.TagName, f.releases[0].TagName)
		return
	}
	rel := &fakeRelease{
		ID:         int64(1000 + len(f.releases)),
		Created:    req,
		TagName:    req.TagName,
		Name:       req.Name,
		Body:       req.Body,
		Draft:      req.Draft != nil && *req.Draft,
		Prerelease: req.Prerelease != nil && *req.Prerelease,
		Assets:     map[string][]byte{},
	}
	f.releases = append(f.releases, rel)
	writeJSON(w, http.StatusCreated, f.releaseResponse(rel))
}

func (f *fakeGitHub) uploadAsset(w http.ResponseWriter, r *http.Request) {
	if !f.checkRepo(w, r) {
		return
	}
	name := r.URL.Query().Get("name")
	data, err := io.ReadAll(r.Body)
	if err != nil {
		f.fail(w, http.StatusBadRequest, "upload %s: %v", name, err)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rel := f.release(w, r)
	switch {
	case rel == nil:
		return
	case name == "":
		f.fail(w, http.StatusBadRequest, "upload without a name: %s", r.URL)
		return
	case rel.Assets[name] != nil:
		// GitHub answers 422 for an existing asset name (githubClient.Upload relies on it).
		f.fail(w, http.StatusUnprocessableEntity, "asset %s uploaded twice", name)
		return
	case r.ContentLength != int64(len(data)):
		f.fail(w, http.StatusBadRequest, "upload %s: Content-Length %d, body %d bytes", name, r.ContentLength, len(data))
		return
	case len(rel.Edits) > 0:
		f.fail(w, http.StatusUnprocessableEntity, "upload %s after the release was published", name)
		return
	}
	rel.Assets[name] = data
	rel.Uploads = append(rel.Uploads, name)
	writeJSON(w, http.StatusCreated, map[string]any{"id": 5000 + len(rel.Uploads), "name": name, "size": len(data), "state": "uploaded"})
}

func (f *fakeGitHub) editRelease(w http.ResponseWriter, r *http.Request) {
	if !f.checkRepo(w, r) {
		return
	}
	var fields map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&fields); err != nil {
		f.fail(w, http.StatusBadRequest, "edit release: %v", err)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rel := f.release(w, r)
	if rel == nil {
		return
	}
	for k, v := range fields {
		var err error
		switch k {
		case "draft":
			err = json.Unmarshal(v, &rel.Draft)
		case "make_latest", "discussion_category_name":
		default:
			f.fail(w, http.StatusUnprocessableEntity, "edit release: unexpected field %s=%s (goreleaser only publishes the draft)", k, v)
			return
		}
		if err != nil {
			f.fail(w, http.StatusBadRequest, "edit release: %s: %v", k, err)
			return
		}
	}
	rel.Edits = append(rel.Edits, releaseEdit{Fields: fields, AssetsBefore: len(rel.Assets)})
	writeJSON(w, http.StatusOK, f.releaseResponse(rel))
}

// snapshot returns copies of the requests and releases received so far.
func (f *fakeGitHub) snapshot() ([]string, []*fakeRelease) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests), slices.Clone(f.releases)
}

// onlyRelease returns the one release created, failing the test unless exactly one was.
func (f *fakeGitHub) onlyRelease(t *testing.T) *fakeRelease {
	t.Helper()
	requests, releases := f.snapshot()
	if len(releases) != 1 {
		t.Fatalf("%d releases created in %s/%s, want one; requests:\n%s", len(releases), f.owner, f.repo, strings.Join(requests, "\n"))
	}
	return releases[0]
}
