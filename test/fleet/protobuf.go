package fleet

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// Protobuf answers. client-go (v0.36) asks for built-in kinds as "protobuf, then JSON", and a
// real API server answers protobuf: JSON would cost the managers several times the CPU to
// decode, which would bias the very numbers the fleet is for. So built-in kinds are answered
// in protobuf when the client prefers it, encoded from the stored JSON through the Go type
// with apimachinery's own serializer; custom resources (EtcdMember) are JSON, as from the API
// server. A watch event's protobuf is encoded once however many watchers receive it.

const protobufType = runtime.ContentTypeProtobuf

var pbSerializer = protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme)

// wantsProtobuf says whether the client's first acceptable type it can get is protobuf.
func wantsProtobuf(r *http.Request, res *resource) bool {
	if res.typed == nil {
		return false
	}
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case protobufType:
			return true
		case "application/json", "*/*", "application/*":
			return false
		}
	}
	return false
}

// toProtobuf encodes a stored object (or list) in protobuf.
func (r *resource) toProtobuf(data []byte, list bool) ([]byte, error) {
	var obj runtime.Object
	if list {
		obj = r.typedList()
	} else {
		o, ok := r.typed().(runtime.Object)
		if !ok {
			return nil, fmt.Errorf("%s is not a runtime.Object", r.kind)
		}
		obj = o
	}
	if err := json.Unmarshal(data, obj); err != nil {
		return nil, fmt.Errorf("decoding %s for protobuf: %w", r.kind, err)
	}
	return encodeProtobuf(obj)
}

func encodeProtobuf(obj runtime.Object) ([]byte, error) {
	var b bytes.Buffer
	if err := pbSerializer.Encode(obj, &b); err != nil {
		return nil, fmt.Errorf("encoding %T in protobuf: %w", obj, err)
	}
	return b.Bytes(), nil
}

// blob is an object as a watch event carries it, with its protobuf made on first need.
type blob struct {
	json []byte
	once sync.Once
	pb   []byte
	err  error
}

func (b *blob) protobuf(r *resource) ([]byte, error) {
	b.once.Do(func() { b.pb, b.err = r.toProtobuf(b.json, false) })
	return b.pb, b.err
}

// pbWatchFrame is one watch event as client-go's protobuf watch decoder reads it: a
// metav1.WatchEvent whose object is the object's protobuf, prefixed by its length (4 bytes,
// big endian: apimachinery's length-delimited framer).
func pbWatchFrame(typ string, obj []byte) ([]byte, error) {
	ev := metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: obj}}
	b, err := ev.Marshal()
	if err != nil {
		return nil, fmt.Errorf("encoding a watch event: %w", err)
	}
	out := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint32(out, uint32(len(b)))
	return append(out, b...), nil
}
