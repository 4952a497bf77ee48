package config

import (
	"strings"
	"testing"
	"time"
)

func TestParsePositionReadsEarliestLatestTimesAndIDs(t *testing.T) {
	for v, want := range map[string]Position{
		"earliest":                    {Initial: "earliest"},
		"latest":                      {Initial: "latest"},
		"2026-12-06T10:00:00Z":        {Initial: "latest", Time: time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)},
		"2026-12-06T11:00:00.5+01:00": {Initial: "latest", Time: time.Date(2026, 12, 6, 10, 0, 0, 5e8, time.UTC)},
		"id:123:4:-1:0":               {Initial: "latest", ID: "123:4:-1:0"},
		"id:123:04:2:-1":              {Initial: "latest", ID: "123:4:2:-1"},
	} {
		got, err := ParsePosition(v)
		if err != nil || got.Initial != want.Initial || !got.Time.Equal(want.Time) || got.ID != want.ID {
			t.Errorf("%s: %+v %v, want %+v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "Earliest", "now", "2026-12-06", "2026-12-06 10:00:00", "1969-12-31T23:59:59Z",
		"id:", "id:1:2:3", "id:-1:2:-1:-1", "id:1:2:-2:-1", "id:1:2:-1:2147483648", "id:a:b:c:d", "123:4:-1:0"} {
		if _, err := ParsePosition(v); err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("%q: %v, want an error naming it", v, err)
		}
	}
}

func TestStreamPositionThatSeeksIsCheckedAgainstTheSubscriptionAndTopics(t *testing.T) {
	for doc, want := range map[string]string{
		"topics: [t]\n    position: yesterday":                                                         `streams[0].position: not a position: "yesterday"`,
		"topics: [t]\n    type: shared\n    position: 2026-12-06T10:00:00Z":                            "set allowSeekShared: true",
		"topics: [t]\n    type: failover\n    position: id:1:2:-1:-1":                                  "set allowSeekShared: true",
		"topics: [t, u]\n    position: id:1:2:-1:-1":                                                   "names no topic and the stream reads 2",
		"topics: [t]\n    type: shared\n    allowSeekShared: true\n    position: 2026-12-06T10:00:00Z": "",
		"topics: [t, u]\n    position: 2026-12-06T10:00:00Z":                                           "",
		"topics: [t]\n    type: shared\n    position: earliest":                                        "",
	} {
		_, err := Parse([]byte("streams:\n  - name: s\n    " + doc + "\n"))
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
}
