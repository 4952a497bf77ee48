package egress

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// CumulativeAcker is what a Subscription implements to acknowledge cumulatively on the
// broker: last and everything before it on its partition; covered (last among them) are
// the deliveries that acknowledgement settles.
type CumulativeAcker interface {
	AckCumulative(last *Delivery, covered []*Delivery) error
}

// ackThrough acknowledges the records up to a position: per partition, with one
// cumulative acknowledgement where the subscription type allows it (Exclusive, Failover)
// and it acknowledges nothing the client has not (no earlier message of the partition
// awaits its acknowledgement or a redelivery), individually otherwise.
func (sm *stream) ackThrough(c echo.Context, ids []string) error {
	sm.mu.Lock()
	var order []string
	groups := map[string][]*unackedEntry{}
	for _, id := range ids {
		if e := sm.takeLocked(id); e != nil {
			if groups[e.d.Topic] == nil {
				order = append(order, e.d.Topic)
			}
			groups[e.d.Topic] = append(groups[e.d.Topic], e)
		}
	}
	ca, canCumulate := sm.sub.(CumulativeAcker)
	canCumulate = canCumulate && (sm.def.Type == "exclusive" || sm.def.Type == "failover")
	cumulate := map[string]*unackedEntry{} // topic -> the entry with the highest id
	for topic, es := range groups {
		if !canCumulate {
			break
		}
		last := es[0]
		for _, e := range es[1:] {
			if idLess(last.d.ID, e.d.ID) {
				last = e
			}
		}
		ok := true
		for id, t := range sm.retrying {
			ok = ok && !(t == topic && idLess(id, last.d.ID))
		}
		for id, e := range sm.unacked {
			ok = ok && !(e.d.Topic == topic && idLess(id, last.d.ID))
		}
		if ok {
			cumulate[topic] = last
		}
	}
	sm.mu.Unlock()
	acked, cumulative := 0, 0
	for gi, topic := range order {
		es := groups[topic]
		var err error
		if last := cumulate[topic]; last != nil {
			ds := make([]*Delivery, len(es))
			for i, e := range es {
				ds[i] = e.d
			}
			if err = ca.AckCumulative(last.d, ds); err == nil {
				cumulative++
			}
		} else if conf, ok := sm.confirmer(); ok {
			var done []*unackedEntry
			done, es, err = sm.ackConfirmed(c.Request().Context(), conf, es)
			acked += len(done)
		} else {
			for i, e := range es {
				if err = sm.sub.Ack(e.d); err != nil {
					es = es[i:]
					break
				}
				sm.srv.obs.Acked(sm.def.Name, 1, time.Since(e.at))
				acked++
			}
		}
		if err != nil {
			left := append([]*unackedEntry(nil), es...)
			for _, t := range order[gi+1:] {
				left = append(left, groups[t]...)
			}
			sm.putBack(left)
			c.Response().Header().Set("Retry-After", "1")
			return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": 503, "acked": acked,
				"error": fmt.Sprintf("acknowledging on %s: %v; %d records stay unacknowledged: post through=N again", topic, err, len(left))})
		}
		if cumulate[topic] != nil {
			for _, e := range es {
				sm.srv.obs.Acked(sm.def.Name, 1, time.Since(e.at))
			}
			acked += len(es)
		}
	}
	sm.wake()
	return c.JSON(http.StatusOK, map[string]any{"status": 200, "acked": acked, "cumulative": cumulative})
}

// idLess orders message ids (ledger:entry:partition:batchIndex) of one partition.
func idLess(a, b string) bool {
	pa, pb := strings.Split(a, ":"), strings.Split(b, ":")
	if len(pa) != 4 || len(pb) != 4 {
		return a < b
	}
	for _, i := range []int{0, 1, 3} {
		x, _ := strconv.ParseInt(pa[i], 10, 64)
		y, _ := strconv.ParseInt(pb[i], 10, 64)
		if x != y {
			return x < y
		}
	}
	return false
}
