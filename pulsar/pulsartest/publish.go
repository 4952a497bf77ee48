package pulsartest

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// Publish is a raw producer for hostile-producer tests: it connects to url (a real or a
// fake broker, pulsar:// only), looks topic up there (no redirects followed), registers
// a producer and sends one message whose metadata is exactly the given bytes, however
// malformed, and waits for the broker's receipt.
func Publish(ctx context.Context, brokerURL, topic string, metadata, payload []byte) error {
	u, err := url.Parse(brokerURL)
	if err != nil || u.Scheme != "pulsar" {
		return fmt.Errorf("pulsartest.Publish: %q is not a pulsar:// URL", brokerURL)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return err
	}
	defer nc.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	_ = nc.SetDeadline(deadline)
	br := bufio.NewReader(nc)
	send := func(cmd *pb.BaseCommand) error {
		buf, err := frame.AppendCommand(nil, cmd)
		if err == nil {
			_, err = nc.Write(buf)
		}
		return err
	}
	// await reads frames until one of type want, answering pings on the way.
	await := func(want pb.BaseCommand_Type) (*pb.BaseCommand, error) {
		for {
			var prefix [4]byte
			if _, err := io.ReadFull(br, prefix[:]); err != nil {
				return nil, err
			}
			body := make([]byte, min(binary.BigEndian.Uint32(prefix[:]), 64<<20))
			if _, err := io.ReadFull(br, body); err != nil {
				return nil, err
			}
			var f frame.Frame
			if err := frame.Decode(body, &f); err != nil {
				return nil, err
			}
			switch t := f.Cmd.GetType(); {
			case t == want:
				return f.Cmd, nil
			case t == pb.BaseCommand_PING:
				if err := send(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}}); err != nil {
					return nil, err
				}
			case t == pb.BaseCommand_ERROR || t == pb.BaseCommand_SEND_ERROR:
				return nil, fmt.Errorf("pulsartest.Publish: the broker answered %s while waiting for %s", f.Cmd, want)
			}
		}
	}
	if err := send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("pulsartest-raw"), ProtocolVersion: proto.Int32(20)}}); err != nil {
		return err
	}
	if _, err := await(pb.BaseCommand_CONNECTED); err != nil {
		return err
	}
	if err := send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String(topic), RequestId: proto.Uint64(1)}}); err != nil {
		return err
	}
	if _, err := await(pb.BaseCommand_LOOKUP_RESPONSE); err != nil {
		return err
	}
	if err := send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(2)}}); err != nil {
		return err
	}
	for {
		ps, err := await(pb.BaseCommand_PRODUCER_SUCCESS)
		if err != nil {
			return err
		}
		if ps.GetProducerSuccess().ProducerReady == nil || ps.GetProducerSuccess().GetProducerReady() {
			break
		}
	}
	buf, err := frame.AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
		ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(0), NumMessages: proto.Int32(1)}}, metadata, payload, 0)
	if err != nil {
		return err
	}
	if _, err := nc.Write(buf); err != nil {
		return err
	}
	_, err = await(pb.BaseCommand_SEND_RECEIPT)
	return err
}
