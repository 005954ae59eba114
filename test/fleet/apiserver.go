package fleet

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// The REST API of one simulated cluster: the paths, verbs and encodings client-go and
// controller-runtime use (JSON only; protobuf is refused with 415, which no client here asks
// for: Cluster API's ClusterCache and the managers use JSON against workload clusters).

// Stats counts the requests a simulated API server answered, by class. They are counted inside
// the simulation, outside the managers, like test/bench's proxy does for real API servers.
type Stats struct {
	Reads        uint64 // GET of one object or a list, discovery included
	Probes       uint64 // of the Reads, GETs of the root path: Cluster API's ClusterCache health probe
	Watches      uint64 // watch requests (each one a long-running stream)
	Writes       uint64 // POST, PUT, PATCH, DELETE, whether they changed anything or not
	NoOpWrites   uint64 // writes answered 200 that changed nothing (no new resourceVersion)
	Unauthorized uint64 // requests refused with 401
	Protobuf     uint64 // answers (and watches) in protobuf rather than JSON
	Handshakes   uint64 // TLS handshakes begun (one per client connection)
}

type stats struct {
	reads, probes, watches, writes, noOpWrites, unauthorized, protobuf, handshakes atomic.Uint64
}

func (s *stats) snapshot() Stats {
	return Stats{Reads: s.reads.Load(), Probes: s.probes.Load(), Watches: s.watches.Load(), Writes: s.writes.Load(),
		NoOpWrites: s.noOpWrites.Load(), Unauthorized: s.unauthorized.Load(), Protobuf: s.protobuf.Load(), Handshakes: s.handshakes.Load()}
}

// count adds one to the counter field picks, in the cluster's stats and in its client's (a,
// nil without Options.Agents).
func (c *Cluster) count(a *stats, field func(*stats) *atomic.Uint64) {
	field(&c.stats).Add(1)
	if a != nil {
		field(a).Add(1)
	}
}

// connAuth is the identity of one TLS connection, verified on its first request: a client
// certificate cannot change within a connection, so verifying it once per connection is what
// the API server's certificate cache amounts to.
type connAuth struct {
	once sync.Once
	err  error
}

type connAuthKey struct{}

func connContext(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connAuthKey{}, &connAuth{})
}

// authenticate accepts a request whose client certificate the cluster's CA signed for client
// authentication, as kube-apiserver's x509 authenticator does with --client-ca-file. There is no
// authorization: every authenticated user is an administrator (the kubeconfigs Cluster API
// writes are system:masters).
func (c *Cluster) authenticate(r *http.Request) error {
	verify := func() error {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			return errors.New("no client certificate")
		}
		inter := x509.NewCertPool()
		for _, ic := range r.TLS.PeerCertificates[1:] {
			inter.AddCert(ic)
		}
		_, err := r.TLS.PeerCertificates[0].Verify(x509.VerifyOptions{
			Roots: c.ca.pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
		return err
	}
	a, _ := r.Context().Value(connAuthKey{}).(*connAuth)
	if a == nil {
		return verify()
	}
	a.once.Do(func() { a.err = verify() })
	return a.err
}

func (c *Cluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a := c.agent(r)
	if err := c.authenticate(r); err != nil {
		c.count(a, func(s *stats) *atomic.Uint64 { return &s.unauthorized })
		writeStatus(w, &metav1.Status{Status: metav1.StatusFailure, Message: "Unauthorized", Reason: metav1.StatusReasonUnauthorized, Code: http.StatusUnauthorized})
		return
	}
	if r.Method == http.MethodGet {
		if c.serveStatic(w, r) {
			c.count(a, func(s *stats) *atomic.Uint64 { return &s.reads })
			if strings.TrimSuffix(r.URL.Path, "/") == "" {
				c.count(a, func(s *stats) *atomic.Uint64 { return &s.probes })
			}
			return
		}
	}
	req, err := c.parse(r)
	if err != nil {
		c.count(a, func(s *stats) *atomic.Uint64 { return &s.reads })
		writeError(w, err)
		return
	}
	switch {
	case r.Method == http.MethodGet && req.name == "" && isWatch(r):
		c.count(a, func(s *stats) *atomic.Uint64 { return &s.watches })
		c.serveWatch(w, r, req)
		return
	case r.Method == http.MethodGet:
		c.count(a, func(s *stats) *atomic.Uint64 { return &s.reads })
	default:
		c.count(a, func(s *stats) *atomic.Uint64 { return &s.writes })
	}
	data, err := c.serveREST(r, req)
	if err != nil {
		writeError(w, err)
		return
	}
	code := http.StatusOK
	if r.Method == http.MethodPost {
		code = http.StatusCreated
	}
	if wantsProtobuf(r, req.res) {
		pb, err := req.res.toProtobuf(data, r.Method == http.MethodGet && req.name == "")
		if err != nil {
			writeError(w, err)
			return
		}
		c.count(a, func(s *stats) *atomic.Uint64 { return &s.protobuf })
		w.Header().Set("Content-Type", protobufType)
		w.WriteHeader(code)
		_, _ = w.Write(pb)
		return
	}
	writeJSON(w, code, data)
}

func isWatch(r *http.Request) bool {
	v := r.URL.Query().Get("watch")
	return v == "true" || v == "1"
}

// serveStatic answers the paths that are not objects: the root (Cluster API's ClusterCache
// probes it for health), version, health and discovery.
func (c *Cluster) serveStatic(w http.ResponseWriter, r *http.Request) bool {
	p := strings.TrimSuffix(r.URL.Path, "/")
	switch p {
	case "":
		paths := []string{"/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"}
		for k := range c.res.discovery {
			if strings.HasPrefix(k, "/apis/") {
				paths = append(paths, k)
			}
		}
		writeJSON(w, http.StatusOK, mustJSON(map[string][]string{"paths": paths}))
		return true
	case "/healthz", "/livez", "/readyz":
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok"))
		return true
	case "/version":
		writeJSON(w, http.StatusOK, c.version)
		return true
	}
	if d, ok := c.res.discovery[p]; ok {
		// Plain application/json: client-go then falls back from aggregated discovery to the
		// legacy documents, as it does against an API server that lacks it.
		writeJSON(w, http.StatusOK, d)
		return true
	}
	return false
}

type request struct {
	res         *resource
	namespace   string
	name        string
	subresource string
}

func (c *Cluster) parse(r *http.Request) (request, error) {
	notFound := apierrors.NewNotFound(metav1.Unversioned.WithResource("").GroupResource(), r.URL.Path)
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var group, version string
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		version, rest = parts[1], parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		group, version, rest = parts[1], parts[2], parts[3:]
	default:
		return request{}, notFound
	}
	var req request
	if len(rest) >= 3 && rest[0] == "namespaces" && !(group == "" && len(rest) == 3 && rest[2] == "status") {
		req.namespace, rest = rest[1], rest[2:]
	}
	if len(rest) == 0 || len(rest) > 3 {
		return request{}, notFound
	}
	req.res = c.res.byPath[group+"/"+version+"/"+rest[0]]
	if req.res == nil {
		return request{}, notFound
	}
	if len(rest) > 1 {
		req.name = rest[1]
	}
	if len(rest) > 2 {
		req.subresource = rest[2]
		if req.subresource != "status" || !req.res.status {
			return request{}, notFound
		}
	}
	if req.namespace != "" && !req.res.namespaced {
		return request{}, notFound
	}
	if req.namespace == "" && req.res.namespaced && req.name != "" {
		return request{}, notFound
	}
	return req, nil
}

// serveREST answers everything but watches, under the store's lock: a cluster's requests are
// serialized, which costs nothing next to a real API server's etcd round trip.
func (c *Cluster) serveREST(r *http.Request, req request) ([]byte, error) {
	var body []byte
	if r.Body != nil && r.Method != http.MethodGet {
		b, err := io.ReadAll(io.LimitReader(r.Body, 3<<20))
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("reading the request body: %v", err))
		}
		body = b
	}
	if r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodDelete {
		var err error
		if body, err = toJSON(r.Header.Get("Content-Type"), body, req); err != nil {
			return nil, err
		}
	}
	s := c.store
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		if req.name == "" {
			return c.list(r, req)
		}
		e := s.get(objKey{res: c.res.index[req.res], namespace: req.namespace, name: req.name})
		if e == nil {
			return nil, apierrors.NewNotFound(req.res.gr(), req.name)
		}
		return e.data, nil
	case http.MethodPost:
		if req.name != "" {
			return nil, apierrors.NewMethodNotSupported(req.res.gr(), "create with a name in the path")
		}
		o, err := decodeObject(body)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("decoding the object: %v", err))
		}
		return c.create(req.res, req.namespace, o)
	case http.MethodPut:
		if req.name == "" {
			return nil, apierrors.NewMethodNotSupported(req.res.gr(), "update of a collection")
		}
		o, err := decodeObject(body)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("decoding the object: %v", err))
		}
		rvBefore := s.rv
		data, err := c.update(req.res, req.namespace, req.name, o, req.subresource, false)
		if err == nil && s.rv == rvBefore {
			c.count(c.agent(r), func(s *stats) *atomic.Uint64 { return &s.noOpWrites })
		}
		return data, err
	case http.MethodPatch:
		if req.name == "" {
			return nil, apierrors.NewMethodNotSupported(req.res.gr(), "patch of a collection")
		}
		ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		rvBefore := s.rv
		data, err := c.patch(req.res, req.namespace, req.name, types.PatchType(ct), body, req.subresource)
		if err == nil && s.rv == rvBefore {
			c.count(c.agent(r), func(s *stats) *atomic.Uint64 { return &s.noOpWrites })
		}
		return data, err
	case http.MethodDelete:
		if req.name == "" || req.subresource != "" {
			return nil, apierrors.NewMethodNotSupported(req.res.gr(), "delete of a collection")
		}
		var opts *metav1.DeleteOptions
		if len(bytes.TrimSpace(body)) > 0 {
			opts = &metav1.DeleteOptions{}
			if err := json.Unmarshal(body, opts); err != nil {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("decoding the delete options: %v", err))
			}
		}
		return c.delete(req.res, req.namespace, req.name, opts)
	}
	return nil, apierrors.NewMethodNotSupported(req.res.gr(), r.Method)
}

// selectors reads the label and field selectors of a list or watch. Field selectors may name
// metadata.name and metadata.namespace (every kind's); Pods, of which there are none, accept any.
func selectors(r *http.Request, res *resource) (labels.Selector, fields.Selector, error) {
	q := r.URL.Query()
	ls, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("labelSelector: %v", err))
	}
	fs, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("fieldSelector: %v", err))
	}
	if res != resPods {
		for _, req := range fs.Requirements() {
			if req.Field != "metadata.name" && req.Field != "metadata.namespace" {
				return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
			}
		}
	}
	return ls, fs, nil
}

// list answers a list, whole: limit and continue are ignored, which a server may do (clients
// follow the continue token only when one is returned). The caller holds the store's lock.
func (c *Cluster) list(r *http.Request, req request) ([]byte, error) {
	ls, fs, err := selectors(r, req.res)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"kind":%q,"apiVersion":%q,"metadata":{"resourceVersion":"%d"},"items":[`, req.res.kind+"List", req.res.apiVersion(), c.store.rv)
	n := 0
	for _, k := range c.store.sortedKeys(c.res.index[req.res], req.namespace) {
		e := c.store.objs[k]
		if !fs.Matches(keyFields(k)) || !ls.Matches(labels.Set(e.labels)) {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.Write(e.data)
		n++
	}
	b.WriteString("]}")
	return b.Bytes(), nil
}

// serveWatch streams watch events. A watch from resourceVersion N gets every change after N
// (410 Expired, as an ERROR event, when N is older than the history); without one, or with "0",
// it first gets an ADDED event per current object; with sendInitialEvents=true (client-go's
// WatchList) those are followed by the bookmark that ends them. With allowWatchBookmarks, a
// bookmark follows every Options.BookmarkInterval.
// A watch ends after timeoutSeconds, or after 30 to 60 minutes like kube-apiserver's
// --min-request-timeout default.
func (c *Cluster) serveWatch(w http.ResponseWriter, r *http.Request, req request) {
	ls, fs, err := selectors(r, req.res)
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	rvParam := q.Get("resourceVersion")
	initialEnd := q.Get("sendInitialEvents") == "true"
	initial := rvParam == "" || rvParam == "0" || initialEnd
	var from uint64
	if !initial {
		if from, err = strconv.ParseUint(rvParam, 10, 64); err != nil {
			writeError(w, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion %q: %v", rvParam, err)))
			return
		}
	}
	timeout := time.Duration(1800+rand.IntN(1800)) * time.Second
	if t, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && t > 0 {
		timeout = time.Duration(t) * time.Second
	}
	wt := &watcher{res: c.res.index[req.res], namespace: req.namespace, selector: ls, fields: fs}
	rv, initialEvents, err := c.store.watch(wt, from, initial)
	pb := wantsProtobuf(r, req.res)
	if pb {
		c.stats.protobuf.Add(1)
		w.Header().Set("Content-Type", protobufType+";stream=watch")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	// write sends one event; obj is JSON, or protobuf when the watch is.
	write := func(typ string, obj []byte) bool {
		var out []byte
		if pb {
			frame, err := pbWatchFrame(typ, obj)
			if err != nil {
				return false
			}
			out = frame
		} else {
			var b bytes.Buffer
			b.Grow(len(obj) + 32)
			b.WriteString(`{"type":"`)
			b.WriteString(typ)
			b.WriteString(`","object":`)
			b.Write(obj)
			b.WriteString("}\n")
			out = b.Bytes()
		}
		_, err := w.Write(out)
		return err == nil
	}
	// encode turns a stored object into what write takes.
	encode := func(b *blob) ([]byte, error) {
		if pb {
			return b.protobuf(req.res)
		}
		return b.json, nil
	}
	if err != nil {
		var gone errGone
		if errors.As(err, &gone) {
			st := apierrors.NewResourceExpired(gone.Error()).Status()
			st.Kind, st.APIVersion = "Status", "v1"
			obj := mustJSON(st)
			if pb {
				if obj, err = encodeProtobuf(&st); err != nil {
					return
				}
			}
			write("ERROR", obj)
		}
		if flusher != nil {
			flusher.Flush()
		}
		return
	}
	defer c.store.stopWatch(wt)
	if flusher != nil {
		flusher.Flush()
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	// With allowWatchBookmarks, a bookmark every minute carries the current resourceVersion,
	// as the API server's watch cache sends them, so that a watch of a quiet kind resumes
	// without 410 however much other kinds changed.
	var bookmarks <-chan time.Time
	if q.Get("allowWatchBookmarks") == "true" {
		ticker := time.NewTicker(c.f.opts.BookmarkInterval)
		defer ticker.Stop()
		bookmarks = ticker.C
	}
	pendingBookmark := initialEnd
	for {
		if pendingBookmark && initialEvents == 0 {
			// Every initial event is written (they were queued before any later one): the
			// bookmark tells the client its list is complete as of rv.
			pendingBookmark = false
			bm, err := encode(&blob{json: []byte(fmt.Sprintf(`{"kind":%q,"apiVersion":%q,"metadata":{"resourceVersion":"%d","annotations":{"k8s.io/initial-events-end":"true"}}}`,
				req.res.kind, req.res.apiVersion(), rv))})
			if err != nil || !write("BOOKMARK", bm) {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		select {
		case ev, ok := <-wt.ch:
			if !ok {
				return
			}
			obj, err := encode(ev.obj)
			if err != nil || !write(ev.typ.String(), obj) {
				return
			}
			initialEvents--
			if flusher != nil && len(wt.ch) == 0 {
				flusher.Flush()
			}
		case <-bookmarks:
			if pendingBookmark {
				continue
			}
			at, ok := c.store.bookmark(wt)
			if !ok {
				continue
			}
			bm, err := encode(&blob{json: []byte(fmt.Sprintf(`{"kind":%q,"apiVersion":%q,"metadata":{"resourceVersion":"%d"}}`,
				req.res.kind, req.res.apiVersion(), at))})
			if err != nil || !write("BOOKMARK", bm) {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		case <-r.Context().Done():
			return
		case <-c.closing:
			return
		case <-timer.C:
			return
		}
	}
}

func writeJSON(w http.ResponseWriter, code int, data []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

func writeStatus(w http.ResponseWriter, st *metav1.Status) {
	st.Kind, st.APIVersion = "Status", "v1"
	writeJSON(w, int(st.Code), mustJSON(st))
}

func writeError(w http.ResponseWriter, err error) {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		st := se.Status()
		writeStatus(w, &st)
		return
	}
	writeStatus(w, &metav1.Status{Status: metav1.StatusFailure, Message: err.Error(), Reason: metav1.StatusReasonInternalError, Code: http.StatusInternalServerError})
}

// toJSON turns a request body into JSON. client-go sends built-in kinds (and DeleteOptions) as
// protobuf when it prefers it, which it does by default since v0.35 with controller-runtime's
// clients; they are decoded with client-go's scheme, as the API server would.
func toJSON(contentType string, body []byte, req request) ([]byte, error) {
	ct, _, _ := mime.ParseMediaType(contentType)
	switch {
	case ct == "application/json" || ct == "" || len(body) == 0:
		return body, nil
	case ct == runtime.ContentTypeProtobuf:
		obj, _, err := protobufDecoder.Decode(body, nil, nil)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("decoding the protobuf body: %v", err))
		}
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("encoding %T: %w", obj, err)
		}
		return b, nil
	}
	return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", req.res.gr(), req.name,
		fmt.Sprintf("the simulated API server does not accept %s", ct), 0, false)
}

var protobufDecoder = clientgoscheme.Codecs.UniversalDeserializer()
