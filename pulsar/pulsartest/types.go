package pulsartest

import "github.com/recordio-bridge/bridge/pulsar/internal/pb"

// The protocol's types in pulsartest's API. They are aliases of the client's generated
// protobuf types, so a test in another module can name them (it cannot import the
// client's internal packages) and read their fields with the generated getters.
type (
	// BaseCommand is one command of the binary protocol.
	BaseCommand = pb.BaseCommand
	// CommandType says which command a BaseCommand holds.
	CommandType = pb.BaseCommand_Type
	// ServerError is an error code the broker answers with.
	ServerError = pb.ServerError
	// MessageMetadata is a message's metadata as a producer sends it.
	MessageMetadata = pb.MessageMetadata
	// MessageIDData is a message id on the wire.
	MessageIDData = pb.MessageIdData
	// AckType is an acknowledgement's type: individual or cumulative.
	AckType = pb.CommandAck_AckType
	// ValidationError is the reason a consumer gives when it acknowledges a message it could not decode.
	ValidationError = pb.CommandAck_ValidationError
	// Schema is a schema as a producer declares it and GET_SCHEMA answers it.
	Schema = pb.Schema
)

// The commands tests most often count, refuse or intercept; CommandTypeOf names any other.
const (
	CommandConnect              = pb.BaseCommand_CONNECT
	CommandLookup               = pb.BaseCommand_LOOKUP
	CommandPartitionedMetadata  = pb.BaseCommand_PARTITIONED_METADATA
	CommandProducer             = pb.BaseCommand_PRODUCER
	CommandSend                 = pb.BaseCommand_SEND
	CommandCloseProducer        = pb.BaseCommand_CLOSE_PRODUCER
	CommandSubscribe            = pb.BaseCommand_SUBSCRIBE
	CommandFlow                 = pb.BaseCommand_FLOW
	CommandAck                  = pb.BaseCommand_ACK
	CommandRedeliver            = pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES
	CommandCloseConsumer        = pb.BaseCommand_CLOSE_CONSUMER
	CommandPing                 = pb.BaseCommand_PING
	CommandAuthResponse         = pb.BaseCommand_AUTH_RESPONSE
	CommandGetSchema            = pb.BaseCommand_GET_SCHEMA
	CommandSeek                 = pb.BaseCommand_SEEK
	CommandGetTopicsOfNamespace = pb.BaseCommand_GET_TOPICS_OF_NAMESPACE
	CommandWatchTopicList       = pb.BaseCommand_WATCH_TOPIC_LIST
)

// The error codes tests most often inject; ServerErrorOf names any other.
const (
	ErrServiceNotReady    = pb.ServerError_ServiceNotReady
	ErrTooManyRequests    = pb.ServerError_TooManyRequests
	ErrPersistence        = pb.ServerError_PersistenceError
	ErrAuthorization      = pb.ServerError_AuthorizationError
	ErrTopicNotFound      = pb.ServerError_TopicNotFound
	ErrTopicTerminated    = pb.ServerError_TopicTerminatedError
	ErrProducerBusy       = pb.ServerError_ProducerBusy
	ErrProducerFenced     = pb.ServerError_ProducerFenced
	ErrConsumerBusy       = pb.ServerError_ConsumerBusy
	ErrIncompatibleSchema = pb.ServerError_IncompatibleSchema
	ErrNotAllowed         = pb.ServerError_NotAllowedError
)

// CommandTypeOf returns the command type the protocol names so ("SEND", "GET_SCHEMA").
func CommandTypeOf(name string) (CommandType, bool) {
	v, ok := pb.BaseCommand_Type_value[name]
	return CommandType(v), ok
}

// ServerErrorOf returns the error code the protocol names so ("ServiceNotReady").
func ServerErrorOf(name string) (ServerError, bool) {
	v, ok := pb.ServerError_value[name]
	return ServerError(v), ok
}
