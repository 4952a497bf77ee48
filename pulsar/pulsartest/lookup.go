// Topic lookups: LOOKUP (with redirects and proxying) and PARTITIONED_METADATA.

package pulsartest

import (
	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

type redirect struct {
	url   string
	proxy bool
}

// ProxyTargets returns the proxy_to_broker_url of every CONNECT that carried one.
func (b *Broker) ProxyTargets() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.proxyTargets...)
}

// Redirect answers lookups of topic with a redirect to url; with proxy, it answers
// Connect to url with proxy_through_service_url set, so the client must come back
// through this broker asking to be proxied to url.
func (b *Broker) Redirect(topic, url string, proxy bool) {
	b.mu.Lock()
	b.redirects[topic] = redirect{url, proxy}
	b.mu.Unlock()
}

// SetPartitions makes topic a partitioned topic with n partitions.
func (b *Broker) SetPartitions(topic string, n int) {
	b.mu.Lock()
	b.partitions[topic] = n
	b.mu.Unlock()
}

// partitionedMetadata answers with the partitions SetPartitions gave the topic.
func (c *serverConn) partitionedMetadata(r *pb.CommandPartitionedTopicMetadata) {
	b := c.b
	b.mu.Lock()
	n := b.partitions[r.GetTopic()]
	b.mu.Unlock()
	c.write(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: &pb.CommandPartitionedTopicMetadataResponse{
		RequestId: proto.Uint64(r.GetRequestId()), Partitions: proto.Uint32(uint32(n)), Response: pb.CommandPartitionedTopicMetadataResponse_Success.Enum()}})
}

// lookup answers with this broker, or the Redirect given for the topic.
func (c *serverConn) lookup(r *pb.CommandLookupTopic) {
	b := c.b
	b.mu.Lock()
	rd, ok := b.redirects[r.GetTopic()]
	b.mu.Unlock()
	if ok {
		resp := &pb.CommandLookupTopicResponse{RequestId: proto.Uint64(r.GetRequestId()), BrokerServiceUrl: proto.String(rd.url),
			BrokerServiceUrlTls: proto.String(rd.url), Authoritative: proto.Bool(true), Response: pb.CommandLookupTopicResponse_Redirect.Enum()}
		if rd.proxy {
			resp.Response = pb.CommandLookupTopicResponse_Connect.Enum()
			resp.ProxyThroughServiceUrl = proto.Bool(true)
		}
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: resp})
		return
	}
	c.write(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
		RequestId: proto.Uint64(r.GetRequestId()), Response: pb.CommandLookupTopicResponse_Connect.Enum(),
		BrokerServiceUrl: proto.String(b.URL()), BrokerServiceUrlTls: proto.String(b.URL()), Authoritative: proto.Bool(true)}})
}
