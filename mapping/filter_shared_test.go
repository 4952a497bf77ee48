package mapping

import (
	"strings"
	"testing"

	"github.com/recordio-bridge/bridge/config"
)

// TestStreamsSharingASubscriptionMustShareTheirFilter: two streams reading one
// subscription of a topic split its messages between them; with different filters,
// each acknowledges unseen what the other keeps, so a message the other stream would
// deliver is lost whenever the broker hands it to the wrong one. That is refused,
// naming both streams, the subscription and the topic; the same filter, or none on
// either, is accepted.
func TestStreamsSharingASubscriptionMustShareTheirFilter(t *testing.T) {
	doc := func(f1, f2 string) string {
		return `
streams:
  - name: updates
    topics: [events]
    subscription: readers
    type: shared` + f1 + `
  - name: offers
    topics: [persistent://public/default/events]
    subscription: readers
    type: shared` + f2 + "\n"
	}
	const upd = "\n    filter: {match: [{json: {type: [UPDATE]}}]}"
	const off = "\n    filter: {match: [{json: {type: [OFFERS]}}]}"
	compile := func(d string) error {
		cfg, err := config.Parse([]byte(d))
		if err != nil {
			return err
		}
		_, err = Compile(cfg)
		return err
	}
	for _, c := range []struct{ f1, f2 string }{{upd, off}, {upd, ""}, {"", off}} {
		err := compile(doc(c.f1, c.f2))
		want := `streams[1]: stream offers reads subscription "readers" of persistent://public/default/events as stream updates does, with another filter`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("filters %q and %q: %v\nwant %q", c.f1, c.f2, err, want)
		}
	}
	for _, c := range []struct{ f1, f2 string }{{upd, upd}, {"", ""}} {
		if err := compile(doc(c.f1, c.f2)); err != nil {
			t.Errorf("filters %q and %q: %v, want accepted", c.f1, c.f2, err)
		}
	}
	// Other subscriptions, or other topics, are not shared.
	if err := compile(strings.Replace(doc(upd, off), "subscription: readers\n    type: shared\n    filter: {match: [{json: {type: [OFFERS]", "subscription: others\n    type: shared\n    filter: {match: [{json: {type: [OFFERS]", 1)); err != nil {
		t.Errorf("two subscriptions: %v, want accepted", err)
	}
}
