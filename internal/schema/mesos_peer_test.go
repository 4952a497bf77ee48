package schema

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
)

// TestBuiltInTypesReadRecordsOfTheMesosDefinitions encodes events and calls with protoc
// from Apache Mesos' own v1 definitions (MESOS_PROTO_INCLUDE: the include directory of a
// Mesos source tree, holding mesos/v1/...; skipped without it or protoc), an encoder
// independent of the built-in types, and reads them with the built-in types: they
// decode (required fields included) and every routing path gives the value encoded.
func TestBuiltInTypesReadRecordsOfTheMesosDefinitions(t *testing.T) {
	inc := os.Getenv("MESOS_PROTO_INCLUDE")
	if inc == "" {
		t.Skip("MESOS_PROTO_INCLUDE is not set (the include directory of a Mesos source tree)")
	}
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Skip("no protoc")
	}
	cases := []struct {
		file, msg, text string
		paths           map[string]string
	}{
		{"mesos/v1/scheduler/scheduler.proto", "mesos.v1.scheduler.Event", `type: UPDATE
update { status { task_id { value: "task-42" } state: TASK_FAILED message: "exited 1" source: SOURCE_EXECUTOR
  reason: REASON_COMMAND_EXECUTOR_FAILED agent_id { value: "agent-3" } executor_id { value: "exec-9" }
  timestamp: 1700000000.25 uuid: "\001\002" labels { labels { key: "team" value: "infra" } }
  container_status { container_id { value: "c-1" } executor_pid: 77 } } }`,
			map[string]string{"type": "UPDATE", "update.status.task_id.value": "task-42", "update.status.state": "TASK_FAILED",
				"update.status.reason": "REASON_COMMAND_EXECUTOR_FAILED", "update.status.agent_id.value": "agent-3",
				"update.status.executor_id.value": "exec-9", "update.status.uuid": "AQI=", "update.status.labels.labels.0.value": "infra"}},
		{"mesos/v1/scheduler/scheduler.proto", "mesos.v1.scheduler.Event", `type: OFFERS
offers { offers { id { value: "o-1" } framework_id { value: "fw" } agent_id { value: "a-1" } hostname: "h1"
  resources { name: "cpus" type: SCALAR scalar { value: 4 } } }
  offers { id { value: "o-2" } framework_id { value: "fw" } agent_id { value: "a-2" } hostname: "h2" } }`,
			map[string]string{"type": "OFFERS", "offers.offers.0.id.value": "o-1", "offers.offers.1.agent_id.value": "a-2", "offers.offers.1.hostname": "h2"}},
		{"mesos/v1/scheduler/scheduler.proto", "mesos.v1.scheduler.Event", `type: SUBSCRIBED
subscribed { framework_id { value: "fw-1" } heartbeat_interval_seconds: 15
  master_info { id: "m" ip: 1 port: 5050 hostname: "master-1" version: "1.11.0" } }`,
			map[string]string{"type": "SUBSCRIBED", "subscribed.framework_id.value": "fw-1", "subscribed.master_info.hostname": "master-1",
				"subscribed.heartbeat_interval_seconds": "15"}},
		{"mesos/v1/scheduler/scheduler.proto", "mesos.v1.scheduler.Call", `framework_id { value: "fw-1" } type: ACKNOWLEDGE
acknowledge { agent_id { value: "a-1" } task_id { value: "t-1" } uuid: "u" }`,
			map[string]string{"type": "ACKNOWLEDGE", "framework_id.value": "fw-1", "acknowledge.task_id.value": "t-1"}},
		{"mesos/v1/scheduler/scheduler.proto", "mesos.v1.scheduler.Call", `type: SUBSCRIBE
subscribe { framework_info { user: "root" name: "marathon" roles: "a" roles: "b" capabilities { type: MULTI_ROLE } } }`,
			map[string]string{"type": "SUBSCRIBE", "subscribe.framework_info.name": "marathon", "subscribe.framework_info.roles.1": "b"}},
		{"mesos/v1/executor/executor.proto", "mesos.v1.executor.Event", `type: LAUNCH
launch { task { name: "web" task_id { value: "t-9" } agent_id { value: "a-1" } resources { name: "mem" type: SCALAR scalar { value: 128 } } } }`,
			map[string]string{"type": "LAUNCH", "launch.task.task_id.value": "t-9", "launch.task.name": "web"}},
		{"mesos/v1/master/master.proto", "mesos.v1.master.Event", `type: TASK_UPDATED
task_updated { framework_id { value: "fw" } status { task_id { value: "t-3" } state: TASK_RUNNING } state: TASK_RUNNING }`,
			map[string]string{"type": "TASK_UPDATED", "task_updated.status.task_id.value": "t-3", "task_updated.state": "TASK_RUNNING"}},
		{"mesos/v1/master/master.proto", "mesos.v1.master.Event", `type: AGENT_ADDED
agent_added { agent { agent_info { hostname: "n1" id { value: "a-5" } } active: true version: "1.11.0" } }`,
			map[string]string{"type": "AGENT_ADDED", "agent_added.agent.agent_info.id.value": "a-5", "agent_added.agent.version": "1.11.0"}},
	}
	for _, c := range cases {
		cmd := exec.Command(protoc, "-I", inc, "--encode="+c.msg, filepath.Join(inc, c.file))
		cmd.Stdin = bytes.NewReader([]byte(c.text))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		rec, err := cmd.Output()
		if err != nil {
			t.Fatalf("protoc --encode=%s: %v\n%s", c.msg, err, stderr.String())
		}
		md, err := findMessage(builtIn, c.msg)
		if err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(rec, dynamicpb.NewMessage(md)); err != nil {
			t.Errorf("%s %s: the built-in type does not decode it: %v", c.msg, c.paths["type"], err)
		}
		for path, want := range c.paths {
			p, err := CompilePath(md, path)
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := p.Value(rec); !ok || got != want {
				t.Errorf("%s %s: %s = %q %v, want %q", c.msg, c.paths["type"], path, got, ok, want)
			}
		}
	}
}
