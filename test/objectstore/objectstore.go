// Package objectstore starts an S3-compatible object store in the test process, reached as a
// real bucket is: over HTTPS with a certificate of its own CA, through the S3 protocol, with
// requests signed by AWS Signature Version 4 under one access key.
//
// The S3 protocol is github.com/johannesboyne/gofakes3 (MIT; MinIO is AGPL and not used) on its
// in-memory backend. gofakes3 v1.2.0 checks no credentials at all: it reads no Authorization
// header (its only use of signatures is to skip the chunk signatures of aws-chunked bodies,
// chunk.go). So every request first passes sigV4, this package's verifier, which refuses what
// AWS S3 refuses for header-signed requests:
//
//   - no Authorization header (anonymous), presigned URLs (query authentication) and other
//     algorithms: AccessDenied;
//   - an access key other than the store's: InvalidAccessKeyId;
//   - a credential scope of another region or service, or an X-Amz-Date more than 15 minutes
//     from the store's clock: SignatureDoesNotMatch / RequestTimeTooSkewed;
//   - a signature that is not the HMAC of the canonical request (method, path, sorted query,
//     the signed headers, which must include host and x-amz-date, and the payload hash) under
//     the secret key: SignatureDoesNotMatch;
//   - a body whose SHA-256 is not the x-amz-content-sha256 the request signed:
//     XAmzContentSHA256Mismatch. UNSIGNED-PAYLOAD is accepted (it is signed as such; AWS
//     accepts it over TLS). aws-chunked streaming payloads (STREAMING-*) are refused: their
//     per-chunk signatures are not checked here, and the clients this project uses (curl, the
//     signer of the tests) do not send them.
//
// The canonical request follows AWS' documentation ("Create a canonical request for Signature
// Version 4", IAM user guide): S3 paths are used as sent, not encoded twice.
package objectstore

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Options configure a Store; zero values get the defaults below.
type Options struct {
	// Buckets are created empty at start. Default: one bucket, "snapshots".
	Buckets []string
	// AccessKeyID and SecretAccessKey are the only credentials the store accepts. Defaults:
	// generated at random.
	AccessKeyID, SecretAccessKey string
	// Region is the region requests must be signed for. Default: us-east-1.
	Region string
}

// Store is a running object store.
type Store struct {
	// Endpoint is host:port (127.0.0.1:<port>), as spec.etcd.snapshots.s3.endpoint takes it.
	Endpoint string
	// URL is https://<Endpoint>.
	URL string
	// CAPEM is the PEM certificate of the CA that signed the store's certificate, as
	// spec.etcd.snapshots.s3.caBundle takes it; CAPool holds it.
	CAPEM  []byte
	CAPool *x509.CertPool
	// AccessKeyID, SecretAccessKey and Region are what requests must be signed with.
	AccessKeyID, SecretAccessKey, Region string
	// Backend is gofakes3's in-memory backend, for reading what was stored without the protocol.
	Backend *s3mem.Backend

	server *httptest.Server
	// refused counts the requests the verifier refused.
	refused atomic.Int64
	// readOnly refuses every write (SetReadOnly).
	readOnly atomic.Bool
	// unreachable closes every connection as soon as it is accepted (SetUnreachable).
	unreachable atomic.Bool
}

// SetReadOnly makes the store refuse (or accept again) every write, as a bucket policy denying
// PutObject and DeleteObject would: a test freezes what the store holds at a point of its own
// choosing, whatever a node's schedule does next.
func (s *Store) SetReadOnly(ro bool) { s.readOnly.Store(ro) }

// SetUnreachable makes the store unreachable (or reachable again) at its endpoint: every
// connection is closed as soon as it is accepted, before a TLS handshake, as a load balancer in
// front of a store that is down does; connections already open are closed too. Clients fail
// at once with a connection error (curl: exit 35; Go: EOF or a reset), nothing is read or
// written. The endpoint stays the same, so the store comes back where it was.
func (s *Store) SetUnreachable(down bool) {
	s.unreachable.Store(down)
	if down {
		s.server.CloseClientConnections()
	}
}

// gate is the store's listener: while the store is unreachable it closes what it accepts.
type gate struct {
	net.Listener
	down *atomic.Bool
}

func (g gate) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil || !g.down.Load() {
			return c, err
		}
		_ = c.Close()
	}
}

// Start starts a store and stops it when the test ends.
func Start(tb testing.TB, opts Options) *Store {
	tb.Helper()
	s, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// New starts a store; Close stops it. Tests use Start; the sandbox (make sandbox RESTORE=1)
// runs one for the length of its demonstration.
func New(opts Options) (*Store, error) {
	if len(opts.Buckets) == 0 {
		opts.Buckets = []string{"snapshots"}
	}
	if opts.AccessKeyID == "" {
		opts.AccessKeyID = "AKIA" + strings.ToUpper(randomHex(8))
	}
	if opts.SecretAccessKey == "" {
		opts.SecretAccessKey = randomHex(20)
	}
	if opts.Region == "" {
		opts.Region = "us-east-1"
	}
	backend := s3mem.New()
	for _, b := range opts.Buckets {
		if err := backend.CreateBucket(b); err != nil {
			return nil, fmt.Errorf("creating bucket %s: %w", b, err)
		}
	}
	s := &Store{
		AccessKeyID: opts.AccessKeyID, SecretAccessKey: opts.SecretAccessKey, Region: opts.Region,
		Backend: backend,
	}
	faker := gofakes3.New(backend, gofakes3.WithAutoBucket(false))
	caPEM, serverCert, err := newTLS()
	if err != nil {
		return nil, fmt.Errorf("creating the store's TLS certificates: %w", err)
	}
	s.CAPEM = caPEM
	s.CAPool = x509.NewCertPool()
	s.CAPool.AppendCertsFromPEM(caPEM)

	s.server = httptest.NewUnstartedServer(s.sigV4(faker.Server()))
	s.server.Listener = gate{Listener: s.server.Listener, down: &s.unreachable}
	s.server.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}
	s.server.StartTLS()
	s.URL = s.server.URL
	u, _ := url.Parse(s.URL)
	s.Endpoint = u.Host
	return s, nil
}

// Close stops the store.
func (s *Store) Close() { s.server.Close() }

// Refused is how many requests the verifier refused so far.
func (s *Store) Refused() int64 { return s.refused.Load() }

// Client is an HTTP client that trusts the store's CA (and nothing else).
func (s *Store) Client() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.CAPool, MinVersion: tls.VersionTLS12}}}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b)
}

// newTLS makes a CA and a server certificate for 127.0.0.1 and localhost, valid for a day.
func newTLS() ([]byte, tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kairos-capi test object store CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// maxSkew is how far X-Amz-Date may be from the store's clock (AWS: 15 minutes).
const maxSkew = 15 * time.Minute

// sigV4 refuses every request that is not signed with the store's credentials.
func (s *Store) sigV4(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, msg := s.verify(r)
		if code == "" && s.readOnly.Load() && r.Method != http.MethodGet && r.Method != http.MethodHead {
			// As a bucket policy that denies writes: the request is authenticated, not allowed.
			code, msg = "AccessDenied", "the bucket is read-only (objectstore.Store.SetReadOnly)"
		}
		if code != "" {
			s.refused.Add(1)
			status := http.StatusForbidden
			if code == "XAmzContentSHA256Mismatch" {
				status = http.StatusBadRequest
			}
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(status)
			fmt.Fprintf(w, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>", code, xmlEscape(msg))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func xmlEscape(s string) string {
	var b bytes.Buffer
	_ = xmlEscapeTo(&b, s)
	return b.String()
}

func xmlEscapeTo(w io.Writer, s string) error {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	_, err := io.WriteString(w, r.Replace(s))
	return err
}

// verify returns the S3 error code and message of a request that must be refused, or "".
// It reads (and restores) the body when the request signed its hash.
func (s *Store) verify(r *http.Request) (string, string) {
	q := r.URL.Query()
	if q.Get("X-Amz-Algorithm") != "" || q.Get("X-Amz-Signature") != "" {
		return "AccessDenied", "presigned URLs are not accepted by this store"
	}
	auth := r.Header.Get("Authorization")
	const algorithm = "AWS4-HMAC-SHA256"
	if !strings.HasPrefix(auth, algorithm+" ") {
		return "AccessDenied", "requests must be signed with " + algorithm
	}
	params := map[string]string{}
	for _, part := range strings.Split(strings.TrimPrefix(auth, algorithm+" "), ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok {
			params[k] = v
		}
	}
	scope := strings.Split(params["Credential"], "/")
	if len(scope) != 5 || params["SignedHeaders"] == "" || params["Signature"] == "" {
		return "AuthorizationHeaderMalformed", "the Authorization header needs Credential, SignedHeaders and Signature"
	}
	keyID, day, region, service, terminator := scope[0], scope[1], scope[2], scope[3], scope[4]
	if keyID != s.AccessKeyID {
		return "InvalidAccessKeyId", "the access key ID does not exist in this store"
	}
	if region != s.Region || service != "s3" || terminator != "aws4_request" {
		return "SignatureDoesNotMatch", fmt.Sprintf("the credential scope %s/%s/%s is not %s/s3/aws4_request", region, service, terminator, s.Region)
	}
	amzDate := r.Header.Get("X-Amz-Date")
	signedAt, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil || amzDate[:8] != day {
		return "AccessDenied", "X-Amz-Date is missing, malformed or not the day of the credential scope"
	}
	if d := time.Since(signedAt); d > maxSkew || d < -maxSkew {
		return "RequestTimeTooSkewed", "the request was signed more than 15 minutes from the store's time"
	}
	signed := strings.Split(params["SignedHeaders"], ";")
	if !slices.Contains(signed, "host") || !slices.Contains(signed, "x-amz-date") {
		return "AccessDenied", "the signed headers must include host and x-amz-date"
	}

	payloadHash := r.Header.Get("X-Amz-Content-Sha256")
	switch {
	case strings.HasPrefix(payloadHash, "STREAMING-"):
		return "NotImplemented", "aws-chunked payloads are not accepted by this store: sign the payload hash or UNSIGNED-PAYLOAD"
	case payloadHash == "UNSIGNED-PAYLOAD":
	default:
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return "IncompleteBody", err.Error()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sum := sha256.Sum256(body)
		actual := hex.EncodeToString(sum[:])
		if payloadHash == "" {
			// Not sent: the signer hashed the body itself.
			payloadHash = actual
		} else if payloadHash != actual {
			return "XAmzContentSHA256Mismatch", "the body's SHA-256 is not the x-amz-content-sha256 the request signed"
		}
	}

	canonical := strings.Join([]string{
		r.Method,
		canonicalPath(r.URL),
		canonicalQuery(r.URL.RawQuery),
		canonicalHeaders(r, signed),
		params["SignedHeaders"],
		payloadHash,
	}, "\n")
	h := sha256.Sum256([]byte(canonical))
	toSign := algorithm + "\n" + amzDate + "\n" + strings.Join(scope[1:], "/") + "\n" + hex.EncodeToString(h[:])
	key := hmacSHA256([]byte("AWS4"+s.SecretAccessKey), day)
	key = hmacSHA256(key, region)
	key = hmacSHA256(key, service)
	key = hmacSHA256(key, terminator)
	want := hex.EncodeToString(hmacSHA256(key, toSign))
	if !hmac.Equal([]byte(want), []byte(params["Signature"])) {
		return "SignatureDoesNotMatch", "the request signature does not match the one computed with the store's secret key"
	}
	return "", ""
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// canonicalPath is the path as sent (S3 does not encode it twice), "/" when empty.
func canonicalPath(u *url.URL) string {
	p := u.EscapedPath()
	if p == "" {
		return "/"
	}
	return p
}

// canonicalQuery sorts the parameters by name, then value, each URI-encoded the AWS way.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	type kv struct{ k, v string }
	var pairs []kv
	for _, part := range strings.Split(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		dk, err1 := url.QueryUnescape(k)
		dv, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			dk, dv = k, v
		}
		pairs = append(pairs, kv{awsEncode(dk), awsEncode(dv)})
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].k != pairs[j].k {
			return pairs[i].k < pairs[j].k
		}
		return pairs[i].v < pairs[j].v
	})
	out := make([]string, len(pairs))
	for i, p := range pairs {
		out[i] = p.k + "=" + p.v
	}
	return strings.Join(out, "&")
}

// awsEncode percent-encodes every byte but A-Z a-z 0-9 - _ . ~, in upper-case hex.
func awsEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// canonicalHeaders is "name:value\n" for every signed header, values trimmed and their inner
// runs of spaces collapsed, several values joined with ','.
func canonicalHeaders(r *http.Request, signed []string) string {
	var b strings.Builder
	for _, name := range signed {
		var values []string
		if name == "host" {
			values = []string{r.Host}
		} else {
			values = slices.Clone(r.Header.Values(name))
		}
		for i, v := range values {
			values[i] = strings.Join(strings.Fields(v), " ")
		}
		b.WriteString(name + ":" + strings.Join(values, ",") + "\n")
	}
	return b.String()
}

// Keys lists the keys of a bucket, read from the backend (not through the protocol), sorted.
func (s *Store) Keys(bucket string) ([]string, error) {
	list, err := s.Backend.ListBucket(bucket, nil, gofakes3.ListBucketPage{})
	if err != nil {
		return nil, fmt.Errorf("listing bucket %s: %w", bucket, err)
	}
	keys := make([]string, 0, len(list.Contents))
	for _, c := range list.Contents {
		keys = append(keys, c.Key)
	}
	sort.Strings(keys)
	return keys, nil
}

// Object reads an object from the backend (not through the protocol).
func (s *Store) Object(bucket, key string) ([]byte, error) {
	obj, err := s.Backend.GetObject(bucket, key, nil)
	if err != nil {
		return nil, fmt.Errorf("reading %s/%s: %w", bucket, key, err)
	}
	defer obj.Contents.Close()
	return io.ReadAll(obj.Contents)
}
