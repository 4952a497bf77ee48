package pulsar

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/conn"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// ErrTopicListRefused: the broker refused to list a namespace's topics (or to watch the
// list) for a reason retrying cannot cure; it wraps the *ServerError. For an
// AuthorizationError the role lacks the namespace-level grant the broker asks for.
var ErrTopicListRefused = errors.New("pulsar: listing the namespace's topics refused")

// topicList is a namespace's persistent topics as the broker gave them (partitions by
// their own names), and the hash of the list.
type topicList struct {
	topics  []string
	hash    string
	changed bool // false: the list is what the hash sent stood for (topics is empty)
}

// listTopics asks the service URL's broker for the namespace's persistent topics that
// match pat (GET_TOPICS_OF_NAMESPACE with topics_pattern, PIP-145). With hash, a broker
// that filters answers changed=false when the list is still the one hash stands for.
// What the broker did not filter, or filtered with another engine, is filtered here.
func (c *Client) listTopics(ctx context.Context, pat *TopicsPattern, hash string) (topicList, error) {
	cn, err := c.serviceConn(ctx)
	if err != nil {
		return topicList{}, err
	}
	id := c.nextRequestID()
	req := &pb.CommandGetTopicsOfNamespace{
		RequestId:     proto.Uint64(id),
		Namespace:     proto.String(pat.Namespace()),
		Mode:          pb.CommandGetTopicsOfNamespace_PERSISTENT.Enum(),
		TopicsPattern: proto.String(pat.String()),
	}
	if hash != "" {
		req.TopicsHash = proto.String(hash)
	}
	resp, err := cn.Request(ctx, id, &pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: req})
	if err != nil {
		return topicList{}, topicListError("listing the topics of namespace", pat, err)
	}
	r := resp.GetGetTopicsOfNamespaceResponse()
	if r == nil {
		return topicList{}, fmt.Errorf("pulsar: listing the topics of namespace %s: unexpected answer %s", pat.Namespace(), resp.GetType())
	}
	if !r.GetChanged() {
		return topicList{hash: hash}, nil
	}
	l := topicList{topics: filterTopics(pat, r.GetTopics()), changed: true}
	l.hash = r.GetTopicsHash()
	if !r.GetFiltered() || l.hash == "" {
		l.hash = topicsHash(l.topics)
	}
	return l, nil
}

// filterTopics keeps the names pat matches.
func filterTopics(pat *TopicsPattern, names []string) []string {
	var out []string
	for _, n := range names {
		if pat.Matches(n) {
			out = append(out, n)
		}
	}
	return out
}

// topicListError names what was refused; a refusal retrying cannot cure is
// ErrTopicListRefused, an AuthorizationError naming the grant the broker wants.
func topicListError(what string, pat *TopicsPattern, err error) error {
	var se *ServerError
	if errors.As(err, &se) {
		switch pb.ServerError(se.Code) {
		case pb.ServerError_AuthorizationError:
			return fmt.Errorf("%w: %s %s for pattern %q: the role needs a namespace-level grant (consume) on %s: %w",
				ErrTopicListRefused, what, pat.Namespace(), pat, pat.Namespace(), err)
		case pb.ServerError_AuthenticationError, pb.ServerError_ServiceNotReady, pb.ServerError_TooManyRequests,
			pb.ServerError_MetadataError, pb.ServerError_UnknownError:
		default:
			return fmt.Errorf("%w: %s %s for pattern %q: %w", ErrTopicListRefused, what, pat.Namespace(), pat, err)
		}
	}
	return fmt.Errorf("pulsar: %s %s for pattern %q: %w", what, pat.Namespace(), pat, err)
}

// topicWatch is one registration of a topic-list watcher (WATCH_TOPIC_LIST) on a
// connection; its updates and its loss go to the discovery.
type topicWatch struct {
	d  *discovery
	id uint64
	cn *conn.Conn
}

func (w *topicWatch) HandleTopicUpdate(u *pb.CommandWatchTopicUpdate) {
	w.d.watchUpdate(w, u.GetNewTopics(), u.GetDeletedTopics(), u.GetTopicsHash())
}

func (w *topicWatch) HandleClose(reason error) { w.d.watchLost(w, reason) }

// watchTopics registers w (its id and discovery set) as a watcher for pat's topics on
// the service URL's broker; it returns the list the broker matched when it registered. errNoWatchers: the broker
// does not offer watchers (enableBrokerSideSubscriptionPatternEvaluation=false).
func (c *Client) watchTopics(ctx context.Context, w *topicWatch, pat *TopicsPattern, hash string) (topicList, error) {
	cn, err := c.serviceConn(ctx)
	if err != nil {
		return topicList{}, err
	}
	if !cn.SupportsTopicWatchers() {
		return topicList{}, errNoWatchers
	}
	w.cn = cn
	if err := cn.AddTopicWatcher(w.id, w); err != nil {
		return topicList{}, err
	}
	id := c.nextRequestID()
	req := &pb.CommandWatchTopicList{
		RequestId: proto.Uint64(id), WatcherId: proto.Uint64(w.id),
		Namespace: proto.String(pat.Namespace()), TopicsPattern: proto.String(pat.String()),
	}
	if hash != "" {
		req.TopicsHash = proto.String(hash)
	}
	resp, err := cn.Request(ctx, id, &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST.Enum(), WatchTopicList: req})
	if err == nil && resp.GetWatchTopicListSuccess() == nil {
		err = fmt.Errorf("unexpected answer %s", resp.GetType())
	}
	if err != nil {
		cn.RemoveTopicWatcher(w.id)
		return topicList{}, topicListError("watching the topics of namespace", pat, err)
	}
	s := resp.GetWatchTopicListSuccess()
	if hash != "" && s.GetTopicsHash() == hash {
		// The list is still the one hash stands for: the broker leaves it out.
		return topicList{hash: hash}, nil
	}
	l := topicList{topics: filterTopics(pat, s.GetTopic()), hash: s.GetTopicsHash(), changed: true}
	return l, nil
}

// close ends the watcher on the broker (best effort: a lost connection ended it).
func (w *topicWatch) close(ctx context.Context, c *Client) {
	w.cn.RemoveTopicWatcher(w.id)
	id := c.nextRequestID()
	_, _ = w.cn.Request(ctx, id, &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE.Enum(),
		WatchTopicListClose: &pb.CommandWatchTopicListClose{RequestId: proto.Uint64(id), WatcherId: proto.Uint64(w.id)}})
}

var errNoWatchers = errors.New("the broker does not offer topic-list watchers")
