package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Request is one API request a proxy forwarded.
type Request struct {
	// At is when the request arrived at the proxy.
	At time.Time `json:"at"`
	// Verb is the Kubernetes verb: create, update, patch, delete, deletecollection, get, list,
	// watch, or "discovery" for everything that is not a resource (/api, /apis, /version, /).
	Verb string `json:"verb"`
	// Resource is the plural resource name, with "/subresource" when there is one
	// (secrets, kairosconfigs/status).
	Resource string `json:"resource,omitempty"`
	// Name is the object's name, empty for lists, watches and creates.
	Name string `json:"name,omitempty"`
	// Code is the HTTP status the API server answered (0 for a watch still open).
	Code int `json:"code"`
	// Patch is the beginning of a PATCH request's body, kept for the trace: it shows what
	// each patch changes (or that it changes nothing). Other bodies are not kept, since
	// creates carry Secret data.
	Patch string `json:"patch,omitempty"`
}

// maxPatch bounds how much of a patch body the trace keeps.
const maxPatch = 2048

// IsWrite reports whether the request asks the API server to change something. A write
// answered with an error (a DELETE answered 404, a conflict) still counts: the client sent it
// and the API server did the work of refusing it.
func (r Request) IsWrite() bool {
	switch r.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// Key names the request's class in breakdowns: "patch kairosconfigs/status 200".
func (r Request) Key() string {
	if r.Resource == "" {
		return fmt.Sprintf("%s %d", r.Verb, r.Code)
	}
	return fmt.Sprintf("%s %s %d", r.Verb, r.Resource, r.Code)
}

// Proxy is a TLS-terminating reverse proxy in front of the API server that records every
// request passing through it. A manager under test is given a kubeconfig pointing at the
// proxy, so the proxy sees every request the manager makes whatever client library, cache or
// rate limiter it uses: the counts do not depend on the manager reporting them. The proxy
// forwards with the API server's administrator credentials, so the manager's kubeconfig carries
// no credentials of its own.
type Proxy struct {
	// Name says which side the proxy stands for ("management", "workload").
	Name string
	// URL is the proxy's address (https://127.0.0.1:port).
	URL string

	caCert   []byte
	server   *http.Server
	listener net.Listener

	mu       sync.Mutex
	requests []Request
	hold     *hold
}

// hold is a request the proxy stops on its way in (HoldFirst).
type hold struct {
	match   func(Request) bool
	arrived chan Request
	release chan struct{}
}

// StartProxy starts a proxy to the API server of upstream, serving TLS with the given serving
// key pair (whose CA is caCert) on a free port of 127.0.0.1.
func StartProxy(name string, upstream *rest.Config, servingCert tls.Certificate, caCert []byte) (*Proxy, error) {
	target, err := url.Parse(upstream.Host)
	if err != nil {
		return nil, fmt.Errorf("parsing the API server address %q: %w", upstream.Host, err)
	}
	transport, err := rest.TransportFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("creating the transport to the API server: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the %s proxy: %w", name, err)
	}
	p := &Proxy{Name: name, URL: "https://" + l.Addr().String(), caCert: caCert, listener: l}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
			// Whatever the client sent, the API server authenticates the proxy's credentials.
			r.Out.Header.Del("Authorization")
		},
		Transport: transport,
		// Watches stream events: pass every chunk on at once.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// A client that goes away (a stopped manager ending its watches, a killed one with
			// requests in flight) is not an error of the proxy: the request is recorded as cut
			// short; anything else is answered like an unreachable API server.
			if errors.Is(err, context.Canceled) {
				w.WriteHeader(StatusClientClosed)
				return
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.server = &http.Server{
		Handler:           p.count(rp),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{servingCert}, MinVersion: tls.VersionTLS12},
		// Clients hanging up mid-watch are expected when a manager stops: keep them out of
		// the benchmark's output.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go func() { _ = p.server.ServeTLS(l, "", "") }()
	return p, nil
}

// Close stops the proxy and ends the connections through it.
func (p *Proxy) Close() error { return p.server.Close() }

// Kubeconfig returns a kubeconfig pointing at the proxy, without credentials.
func (p *Proxy) Kubeconfig(contextName string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{Server: p.URL, CertificateAuthorityData: p.caCert}
	cfg.AuthInfos[contextName] = &clientcmdapi.AuthInfo{}
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: contextName}
	cfg.CurrentContext = contextName
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("writing the kubeconfig of the %s proxy: %w", p.Name, err)
	}
	return out, nil
}

// WriteTrace writes every request the proxy forwarded, one JSON object a line, so that a
// manager's requests can be followed one by one.
func (p *Proxy) WriteTrace(path string) error {
	p.mu.Lock()
	reqs := append([]Request(nil), p.requests...)
	p.mu.Unlock()
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].At.Before(reqs[j].At) })
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, r := range reqs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing the %s request trace: %w", p.Name, err)
	}
	return nil
}

// Host is the proxy's host:port, as client-go's metrics label requests to it.
func (p *Proxy) Host() string { return strings.TrimPrefix(p.URL, "https://") }

// Between returns the requests that arrived in [from, to).
func (p *Proxy) Between(from, to time.Time) []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Request
	for _, r := range p.requests {
		if !r.At.Before(from) && r.At.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// LastWrite returns when the latest write arrived, or the zero time. Lease writes do not count:
// a manager with leader election renews its Lease every retry period for as long as it runs, so
// a run with a leader would never look finished (the storm's leader-loss case waited out its
// one-minute limit every time).
func (p *Proxy) LastWrite() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var last time.Time
	for _, r := range p.requests {
		if r.IsWrite() && r.Resource != "leases" && r.At.After(last) {
			last = r.At
		}
	}
	return last
}

// HoldFirst stops the first request that arrives from now on for which match is true, before
// it is forwarded, and announces it on arrived; it goes on to the API server when release is
// called (or ends when its client goes away first). match is called for every request until
// one matches, one request at a time (under the proxy's lock), so it may count. One request
// stopped is a moment frozen for the caller to act in (the storm kills the manager while one
// of its writes is stopped), without piling up the client's other requests.
func (p *Proxy) HoldFirst(match func(Request) bool) (arrived <-chan Request, release func()) {
	h := &hold{match: match, arrived: make(chan Request, 1), release: make(chan struct{})}
	p.mu.Lock()
	p.hold = h
	p.mu.Unlock()
	var once sync.Once
	return h.arrived, func() { once.Do(func() { close(h.release) }) }
}

// held reports whether req is the request HoldFirst waits for, and if so stops waiting for it.
func (p *Proxy) held(req Request) *hold {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold == nil || !p.hold.match(req) {
		return nil
	}
	h := p.hold
	p.hold = nil
	return h
}

func (p *Proxy) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := classify(r)
		req.At = time.Now()
		if h := p.held(req); h != nil {
			h.arrived <- req
			select {
			case <-h.release:
			case <-r.Context().Done():
			}
		}
		if req.Verb == "watch" {
			// A watch lasts as long as the client keeps it: record it when it opens.
			p.mu.Lock()
			p.requests = append(p.requests, req)
			p.mu.Unlock()
			next.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodPatch && r.Body != nil {
			body, err := io.ReadAll(r.Body)
			_ = r.Body.Close()
			if err != nil {
				http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			req.Patch = string(body[:min(len(body), maxPatch)])
		}
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		// Recorded even when the reverse proxy aborts the answer (it panics with
		// http.ErrAbortHandler when the client went away while the answer was copied): with the
		// API server's code when it had answered, otherwise as cut short.
		defer func() {
			req.Code = sw.code
			if !sw.wrote {
				req.Code = StatusClientClosed
			}
			p.mu.Lock()
			p.requests = append(p.requests, req)
			p.mu.Unlock()
		}()
		next.ServeHTTP(sw, r)
		sw.wrote = true // an answer without an explicit status is a 200
	})
}

// StatusClientClosed is the code a request is recorded with when its client went away before the
// answer (nginx's "client closed request"): the API server may or may not have carried it out.
const StatusClientClosed = 499

// statusWriter remembers the status code of a response.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (s *statusWriter) WriteHeader(code int) {
	s.code, s.wrote = code, true
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the underlying writer's Flush.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// classify turns a request's method and path into a verb and resource, the way the API
// server's request info resolver does for the paths clients use.
func classify(r *http.Request) Request {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// Strip the API prefix: /api/v1/... or /apis/<group>/<version>/...
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	}
	if len(rest) == 0 {
		return Request{Verb: "discovery"}
	}
	// namespaces/<ns>/<resource>/... addresses a namespaced resource; namespaces/<name> alone
	// (or with a subresource such as finalize) is the Namespace object itself.
	if rest[0] == "namespaces" && len(rest) >= 3 {
		rest = rest[2:]
	}
	resource, name, sub := rest[0], "", ""
	if len(rest) >= 2 {
		name = rest[1]
	}
	if len(rest) >= 3 {
		sub = rest[2]
	}
	if sub != "" {
		resource += "/" + sub
	}
	q := r.URL.Query()
	verb := ""
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		switch {
		case q.Get("watch") == "true" || q.Get("watch") == "1":
			verb = "watch"
		case name == "":
			verb = "list"
		default:
			verb = "get"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		if name == "" {
			verb = "deletecollection"
		} else {
			verb = "delete"
		}
	default:
		verb = strings.ToLower(r.Method)
	}
	return Request{Verb: verb, Resource: resource, Name: name}
}

// Breakdown counts requests per class, most frequent first.
func Breakdown(reqs []Request, keep func(Request) bool) []Count {
	counts := map[string]int{}
	for _, r := range reqs {
		if keep == nil || keep(r) {
			counts[r.Key()]++
		}
	}
	out := make([]Count, 0, len(counts))
	for k, n := range counts {
		out = append(out, Count{What: k, N: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].N != out[j].N {
			return out[i].N > out[j].N
		}
		return out[i].What < out[j].What
	})
	return out
}

// Count is the number of requests of one class.
type Count struct {
	What string `json:"what"`
	N    int    `json:"n"`
}

// Writes counts the writes among reqs.
func Writes(reqs []Request) int {
	n := 0
	for _, r := range reqs {
		if r.IsWrite() {
			n++
		}
	}
	return n
}
