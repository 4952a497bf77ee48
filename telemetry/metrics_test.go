package telemetry

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMetricsReachThePrometheusHandler(t *testing.T) {
	m, err := NewMetrics("v-test")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	m.StreamStarted("mesos")
	m.RecordsSettled("mesos", 200, 3, 300)
	m.RecordsSettled("mesos", 413, 1, 5000)
	m.PublishLatency("mesos", 3*time.Millisecond)
	m.StreamEnded("mesos", 200)
	m.DecodeError("mesos")
	m.Reload("invalid")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`bridge_build_info{version="v-test"} 1`,
		`bridge_ingress_records_total{route="mesos",status="200"} 3`,
		`bridge_ingress_records_total{route="mesos",status="413"} 1`,
		`bridge_ingress_bytes_total{route="mesos",status="200"} 300`,
		`bridge_ingress_streams_total{route="mesos",status="200"} 1`,
		`bridge_ingress_streams_active{route="mesos"} 0`,
		`bridge_ingress_decode_errors_total{route="mesos"} 1`,
		`bridge_publish_duration_seconds_bucket{route="mesos",le="0.005"} 1`,
		`bridge_config_reloads_total{result="invalid"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("missing %s", want)
		}
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", body)
	}
}
