package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// PatternStats are one topicsPattern stream's discovery figures at one instant, over its
// consumers (one per client response); counters only grow.
type PatternStats struct {
	Stream string
	// Topics is the most topics one of the stream's consumers reads now: the topics
	// the pattern matches, as far as they could be subscribed.
	Topics int64
	// Added and Removed count the topics the stream's consumers subscribed to after
	// they started, or closed because the topic was deleted or no longer listed.
	Added, Removed int64
	// Discovery counts the stream's consumers by how they learn of topics: watching
	// (the broker's topic-list watcher), reconnecting (the watcher was lost) or
	// polling (listing the namespace every discoveryInterval).
	Discovery map[string]int64
}

// DiscoveryStates are the values of bridge_egress_pattern_discovery's state label.
var DiscoveryStates = []string{"watching", "reconnecting", "polling"}

// ObservePattern registers bridge_egress_pattern_topics{stream},
// bridge_egress_pattern_topics_added_total{stream},
// bridge_egress_pattern_topics_removed_total{stream} and
// bridge_egress_pattern_discovery{stream,state}, read from stats at each scrape.
func (m *Metrics) ObservePattern(stats func() []PatternStats) error {
	mt := m.provider.Meter("github.com/recordio-bridge/bridge")
	topics, err1 := mt.Int64ObservableGauge("bridge.egress.pattern.topics", metric.WithDescription("Topics a topicsPattern stream reads now (the most of any of its consumers): those its pattern matches, as far as they could be subscribed."))
	added, err2 := mt.Int64ObservableCounter("bridge.egress.pattern.topics.added", metric.WithDescription("Topics a topicsPattern stream's consumers subscribed to after they started (created, or newly matched), summed over its consumers."))
	removed, err3 := mt.Int64ObservableCounter("bridge.egress.pattern.topics.removed", metric.WithDescription("Topics whose consumer a topicsPattern stream closed because the topic was deleted or is no longer listed, summed over its consumers."))
	discovery, err4 := mt.Int64ObservableGauge("bridge.egress.pattern.discovery", metric.WithDescription("A topicsPattern stream's consumers by how they discover topics: watching (the broker's topic-list watcher, and a listing every discoveryInterval), reconnecting (the watcher was lost; registering it again), polling (the broker offers no watcher or refused one: a listing every discoveryInterval)."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return err
	}
	_, err := mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, s := range stats() {
			stream := attribute.String("stream", s.Stream)
			at := metric.WithAttributeSet(attribute.NewSet(stream))
			o.ObserveInt64(topics, s.Topics, at)
			o.ObserveInt64(added, s.Added, at)
			o.ObserveInt64(removed, s.Removed, at)
			for _, state := range DiscoveryStates {
				o.ObserveInt64(discovery, s.Discovery[state], metric.WithAttributeSet(attribute.NewSet(stream, attribute.String("state", state))))
			}
		}
		return nil
	}, topics, added, removed, discovery)
	return err
}
