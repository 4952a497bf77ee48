package pulsartest

import (
	"encoding/hex"
	"hash/crc32"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// Topic discovery (PIP-145): the fake broker keeps a list of the topics created with
// CreateTopic, answers GET_TOPICS_OF_NAMESPACE with it (unfiltered, as a broker that
// does not evaluate patterns: the client filters) and, with SetTopicWatchers, announces
// supports_topic_watchers and serves WATCH_TOPIC_LIST with WATCH_TOPIC_UPDATE frames.
// Once a topic was created, a SUBSCRIBE that must not create its topic
// (force_topic_creation false) is refused with TopicNotFound for a topic not listed.

type topicWatcher struct {
	c       *serverConn
	id      uint64
	pattern *regexp.Regexp
}

// SetTopicWatchers makes the broker announce topic-list watchers in CONNECTED and
// accept WATCH_TOPIC_LIST (a broker with enableBrokerSideSubscriptionPatternEvaluation).
// It applies to connections made from now on.
func (b *Broker) SetTopicWatchers(on bool) { b.mu.Lock(); b.topicWatchers = on; b.mu.Unlock() }

// SetWatchersDeaf makes the registered watchers miss every change from now on (as a
// broker's watcher does while its metadata session is down), until called with false.
func (b *Broker) SetWatchersDeaf(on bool) { b.mu.Lock(); b.watchersDeaf = on; b.mu.Unlock() }

// CreateTopic adds topic to the namespace's list (with partitions > 0, a partitioned
// topic of that many partitions, each listed by its own name) and tells the watchers.
// Called again with more partitions, it adds the new ones.
func (b *Broker) CreateTopic(topic string, partitions int) {
	b.mu.Lock()
	if b.topicList == nil {
		b.topicList = map[string]struct{}{}
	}
	var added []string
	if partitions == 0 {
		added = append(added, topic)
	} else {
		for i := b.partitions[topic]; i < partitions; i++ {
			added = append(added, topic+"-partition-"+strconv.Itoa(i))
		}
		b.partitions[topic] = partitions
	}
	for _, n := range added {
		b.topicList[n] = struct{}{}
	}
	b.mu.Unlock()
	b.notifyWatchers(added, nil)
}

// DeleteTopic removes topic (every partition of it) from the list, closes its
// consumers (CLOSE_CONSUMER, as a forced deletion does) and tells the watchers.
func (b *Broker) DeleteTopic(topic string) {
	b.mu.Lock()
	var deleted []string
	for n := range b.topicList {
		if n == topic || strings.HasPrefix(n, topic+"-partition-") {
			deleted = append(deleted, n)
			delete(b.topicList, n)
		}
	}
	delete(b.partitions, topic)
	var closing []*subscriber
	kept := b.subs[:0]
	for _, s := range b.subs {
		if s.topic == topic || strings.HasPrefix(s.topic, topic+"-partition-") {
			closing = append(closing, s)
			continue
		}
		kept = append(kept, s)
	}
	b.subs = kept
	b.mu.Unlock()
	for _, s := range closing {
		s.c.write(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{
			ConsumerId: proto.Uint64(s.id), RequestId: proto.Uint64(0)}})
	}
	slices.Sort(deleted)
	b.notifyWatchers(nil, deleted)
}

// Watchers returns how many topic-list watchers are registered.
func (b *Broker) Watchers() int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.watchers) }

func (b *Broker) notifyWatchers(added, deleted []string) {
	b.mu.Lock()
	if b.watchersDeaf {
		b.mu.Unlock()
		return
	}
	ws := slices.Clone(b.watchers)
	b.mu.Unlock()
	for _, w := range ws {
		a, d := matching(w.pattern, added), matching(w.pattern, deleted)
		if len(a) == 0 && len(d) == 0 {
			continue
		}
		w.c.write(&pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_UPDATE.Enum(), WatchTopicUpdate: &pb.CommandWatchTopicUpdate{
			WatcherId: proto.Uint64(w.id), NewTopics: a, DeletedTopics: d, TopicsHash: proto.String("")}})
	}
}

// matching keeps the names whose topic (scheme and partition suffix removed) re matches.
func matching(re *regexp.Regexp, names []string) []string {
	var out []string
	for _, n := range names {
		base := n
		if i := strings.LastIndex(base, "-partition-"); i >= 0 {
			base = base[:i]
		}
		if _, rest, ok := strings.Cut(base, "://"); ok && re.MatchString(rest) {
			out = append(out, n)
		}
	}
	return out
}

func (b *Broker) listedLocked(namespace string) []string {
	var out []string
	for n := range b.topicList {
		if strings.HasPrefix(n, "persistent://"+namespace+"/") {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func (c *serverConn) getTopics(r *pb.CommandGetTopicsOfNamespace) {
	b := c.b
	b.mu.Lock()
	topics := b.listedLocked(r.GetNamespace())
	b.mu.Unlock()
	c.write(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE.Enum(),
		GetTopicsOfNamespaceResponse: &pb.CommandGetTopicsOfNamespaceResponse{
			RequestId: proto.Uint64(r.GetRequestId()), Topics: topics, Filtered: proto.Bool(false), Changed: proto.Bool(true)}})
}

func (c *serverConn) watchTopics(r *pb.CommandWatchTopicList) {
	b := c.b
	_, rest, _ := strings.Cut(r.GetTopicsPattern(), "://")
	re, err := regexp.Compile(`^(?:` + rest + `)$`)
	b.mu.Lock()
	on := b.topicWatchers
	b.mu.Unlock()
	if !on || err != nil {
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{RequestId: proto.Uint64(r.GetRequestId()),
			Error: pb.ServerError_NotAllowedError.Enum(), Message: proto.String("pulsartest: topic-list watchers are off")}})
		return
	}
	b.mu.Lock()
	b.watchers = append(b.watchers, &topicWatcher{c: c, id: r.GetWatcherId(), pattern: re})
	topics := matching(re, b.listedLocked(r.GetNamespace()))
	b.mu.Unlock()
	// As the broker does: a client whose hash is the list's gets no list (unchanged).
	hash := topicsHash(topics)
	if r.GetTopicsHash() == hash {
		topics = nil
	}
	c.write(&pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST_SUCCESS.Enum(), WatchTopicListSuccess: &pb.CommandWatchTopicListSuccess{
		RequestId: proto.Uint64(r.GetRequestId()), WatcherId: proto.Uint64(r.GetWatcherId()), Topic: topics, TopicsHash: proto.String(hash)}})
}

func (c *serverConn) closeWatcher(r *pb.CommandWatchTopicListClose) {
	c.b.mu.Lock()
	c.b.watchers = slices.DeleteFunc(c.b.watchers, func(w *topicWatcher) bool { return w.c == c && w.id == r.GetWatcherId() })
	c.b.mu.Unlock()
	c.write(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(r.GetRequestId())}})
}

// missingLocked reports whether a SUBSCRIBE that must not create its topic names one
// that is not listed (only once topics are tracked with CreateTopic).
func (b *Broker) missingLocked(s *pb.CommandSubscribe) bool {
	if b.topicList == nil || s.ForceTopicCreation == nil || s.GetForceTopicCreation() {
		return false
	}
	_, ok := b.topicList[s.GetTopic()]
	return !ok
}

// topicsHash is the broker's hash of a topic list: CRC32C of the sorted names joined by
// commas, its bytes lowest first in hex (Guava's HashCode.toString).
func topicsHash(topics []string) string {
	sorted := slices.Clone(topics)
	slices.Sort(sorted)
	sum := crc32.Checksum([]byte(strings.Join(sorted, ",")), crc32.MakeTable(crc32.Castagnoli))
	return hex.EncodeToString([]byte{byte(sum), byte(sum >> 8), byte(sum >> 16), byte(sum >> 24)})
}
