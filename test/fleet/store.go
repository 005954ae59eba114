package fleet

import (
	"sort"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// The object store of one simulated cluster. Objects are kept as the JSON the API server
// answers with (resourceVersion included), so reads cost no encoding and a cluster holds one
// byte slice per object; labels are kept decoded beside them for selectors. Resource versions
// are one counter per cluster, as etcd's revision is per cluster.

type objKey struct {
	res       uint8
	namespace string
	name      string
}

type entry struct {
	data   []byte
	rv     uint64
	labels map[string]string
}

type eventType uint8

const (
	added eventType = iota
	modified
	deleted
)

func (t eventType) String() string {
	switch t {
	case added:
		return "ADDED"
	case modified:
		return "MODIFIED"
	default:
		return "DELETED"
	}
}

// event is one change, kept in the history for watches that start at an older resourceVersion.
// prevLabels lets a watch with a label selector see an object leave its selection (DELETED),
// as the API server's watch cache does.
type event struct {
	typ        eventType
	key        objKey
	rv         uint64
	data       []byte
	labels     map[string]string
	prevLabels map[string]string
}

// watchEvent is what a watcher receives.
type watchEvent struct {
	typ eventType
	obj *blob
}

type watcher struct {
	res       uint8
	namespace string // "" for all
	fields    fields.Selector
	selector  labels.Selector
	ch        chan watchEvent
	closed    bool
}

// watchBuffer is how many events a watcher may lag before it is dropped; the client then
// watches again from its last resourceVersion, as with an API server that drops slow watchers.
const watchBuffer = 128

type store struct {
	mu       sync.Mutex
	rv       uint64
	objs     map[objKey]*entry
	watchers []*watcher
	// history keeps the latest events of each resource (kind), as the API server's watch cache
	// does per resource: a Lease renewal every 10 s does not push a Node watch's
	// resourceVersion out of the Node history. compacted is, per resource, the version up to
	// which events may be missing: a watch from an older version gets 410 Gone and relists.
	history    map[uint8]*ring
	historyCap int
}

type ring struct {
	events    []event
	head      int
	compacted uint64
}

func newStore(historyCap int) *store {
	return &store{objs: map[objKey]*entry{}, historyCap: historyCap, history: map[uint8]*ring{}}
}

// get returns the object under key, or nil. The caller must hold mu.
func (s *store) get(k objKey) *entry { return s.objs[k] }

// nextRV reserves the next resourceVersion. The caller must hold mu.
func (s *store) nextRV() uint64 {
	s.rv++
	return s.rv
}

// commit records a change made at resourceVersion rv (from nextRV) and tells the watchers. e is
// nil for a deletion, whose last state is data. The caller must hold mu.
func (s *store) commit(typ eventType, k objKey, rv uint64, e *entry, data []byte, prev *entry) {
	var lbls, prevLabels map[string]string
	if prev != nil {
		prevLabels = prev.labels
	}
	if e != nil {
		s.objs[k] = e
		lbls = e.labels
		data = e.data
	} else {
		delete(s.objs, k)
		lbls = prevLabels
	}
	ev := event{typ: typ, key: k, rv: rv, data: data, labels: lbls, prevLabels: prevLabels}
	s.record(ev)
	live := s.watchers[:0]
	shared := &blob{json: ev.data} // encoded to protobuf once for every watcher
	for _, w := range s.watchers {
		if typ, ok := w.matches(ev); ok && !w.send(watchEvent{typ: typ, obj: shared}) {
			continue
		}
		live = append(live, w)
	}
	clear(s.watchers[len(live):])
	s.watchers = live
}

func (s *store) record(ev event) {
	r := s.history[ev.key.res]
	if r == nil {
		r = &ring{}
		s.history[ev.key.res] = r
	}
	if s.historyCap == 0 {
		r.compacted = ev.rv
		return
	}
	if len(r.events) < s.historyCap {
		r.events = append(r.events, ev)
		return
	}
	r.compacted = r.events[r.head].rv
	r.events[r.head] = ev
	r.head = (r.head + 1) % len(r.events)
}

// matches says whether a watcher sees ev, and as which type: an object whose labels stop
// matching the selector is DELETED for it, one that starts matching is ADDED.
func (w *watcher) matches(ev event) (eventType, bool) {
	if ev.key.res != w.res || (w.namespace != "" && ev.key.namespace != w.namespace) || !w.fields.Matches(keyFields(ev.key)) {
		return 0, false
	}
	now := w.selector.Matches(labels.Set(ev.labels))
	if ev.typ != modified {
		return ev.typ, now
	}
	before := w.selector.Matches(labels.Set(ev.prevLabels))
	switch {
	case now && before:
		return modified, true
	case now:
		return added, true
	case before:
		return deleted, true
	}
	return 0, false
}

// send queues an event without blocking; a watcher too far behind is closed and reports false.
func (w *watcher) send(ev watchEvent) bool {
	select {
	case w.ch <- ev:
		return true
	default:
		w.closed = true
		close(w.ch)
		return false
	}
}

// errGone says that a watch asked for a resourceVersion older than the history holds.
type errGone struct{ rv, compacted uint64 }

func (e errGone) Error() string {
	return "too old resource version: " + strconv.FormatUint(e.rv, 10) + " (" + strconv.FormatUint(e.compacted, 10) + ")"
}

// watch registers a watcher that receives every event after resourceVersion from (replayed from
// the history first), or, with initial, an ADDED event per current object first. It returns the
// current resourceVersion and how many initial events were queued.
func (s *store) watch(w *watcher, from uint64, initial bool) (uint64, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.ch = make(chan watchEvent, watchBuffer)
	var backlog []watchEvent
	if initial {
		for _, k := range s.sortedKeys(w.res, w.namespace) {
			e := s.objs[k]
			if w.fields.Matches(keyFields(k)) && w.selector.Matches(labels.Set(e.labels)) {
				backlog = append(backlog, watchEvent{typ: added, obj: &blob{json: e.data}})
			}
		}
	} else {
		r := s.history[w.res]
		if r == nil {
			r = &ring{}
		}
		if from < r.compacted {
			return 0, 0, errGone{rv: from, compacted: r.compacted}
		}
		n := len(r.events)
		for i := 0; i < n; i++ {
			ev := r.events[(r.head+i)%n]
			if ev.rv <= from {
				continue
			}
			if typ, ok := w.matches(ev); ok {
				backlog = append(backlog, watchEvent{typ: typ, obj: &blob{json: ev.data}})
			}
		}
	}
	if len(backlog) > cap(w.ch) {
		w.ch = make(chan watchEvent, len(backlog)+watchBuffer)
	}
	for _, ev := range backlog {
		w.ch <- ev
	}
	s.watchers = append(s.watchers, w)
	return s.rv, len(backlog), nil
}

// stopWatch removes a watcher (when its client went away).
func (s *store) stopWatch(w *watcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.watchers {
		if x == w {
			s.watchers = append(s.watchers[:i], s.watchers[i+1:]...)
			if !w.closed {
				w.closed = true
				close(w.ch)
			}
			return
		}
	}
}

// closeWatchers ends every watch (the cluster is going away).
func (s *store) closeWatchers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.watchers {
		if !w.closed {
			w.closed = true
			close(w.ch)
		}
	}
	s.watchers = nil
}

// sortedKeys lists the keys of one resource (in one namespace, or all) in name order, as an
// API server lists from etcd. The caller must hold mu.
func (s *store) sortedKeys(res uint8, namespace string) []objKey {
	var keys []objKey
	for k := range s.objs {
		if k.res == res && (namespace == "" || k.namespace == namespace) {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].namespace != keys[j].namespace {
			return keys[i].namespace < keys[j].namespace
		}
		return keys[i].name < keys[j].name
	})
	return keys
}

// keyFields are the fields a field selector may name: metadata.name and metadata.namespace,
// which every kind supports.
func keyFields(k objKey) fields.Set {
	return fields.Set{"metadata.name": k.name, "metadata.namespace": k.namespace}
}

// bookmark returns the resourceVersion a watcher may be told it has seen everything up to: the
// current one, when no event is queued for it (every event up to it was committed before and
// has been taken from the channel).
func (s *store) bookmark(w *watcher) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.closed || len(w.ch) > 0 {
		return 0, false
	}
	return s.rv, true
}
