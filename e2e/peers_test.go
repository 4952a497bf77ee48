package e2e

import (
	"strings"

	"github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"
)

// quietLogger keeps the official client's informational chatter out of test output;
// its warnings and errors still show.
func quietLogger() log.Logger {
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	return log.NewLoggerWithLogrus(l)
}

// topicName returns the last path element of a fully qualified topic name.
func topicName(topic string) string {
	return topic[strings.LastIndex(topic, "/")+1:]
}
