package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/waittest"
)

func TestSingleServerJetStream(t *testing.T) {
	t.Parallel()
	n := natstest.Start(t)
	_, js := natstest.Connect(t, n.URL())
	ctx := context.Background()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("info %+v, %v", info, err)
	}
}

func TestClusterR3SurvivesNodeLoss(t *testing.T) {
	t.Parallel()
	nodes := natstest.StartCluster(t, 3)
	_, js := natstest.Connect(t, natstest.ClusterURL(nodes))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "r3.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Name() == info.Cluster.Leader {
			n.Shutdown()
		}
	}
	// A new leader takes over and the acknowledged message is still there.
	until, _ := ctx.Deadline()
	waittest.Eventually(t, time.Until(until), "a new leader accepting a publish", func() bool {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		_, err := js.Publish(pctx, "r3.b", []byte("y"))
		return err == nil
	})
	info, err = s.Info(ctx)
	if err != nil || info.State.Msgs != 2 {
		t.Fatalf("after failover: %+v, %v", info.State, err)
	}
}
