package localcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ControllerLabelSelector selects the chart's controller Deployment and pods.
const ControllerLabelSelector = "app.kubernetes.io/component=controller"

// stoppedReplicasAnnotation keeps the controller's replicas while
// StopController has scaled it to zero.
const stoppedReplicasAnnotation = "gpudra.io/stopped-replicas"

// ControllerDeployment is the chart's controller Deployment.
func (c *Cluster) ControllerDeployment(ctx context.Context) (*appsv1.Deployment, error) {
	cs, err := c.Client()
	if err != nil {
		return nil, err
	}
	list, err := cs.AppsV1().Deployments(c.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: ControllerLabelSelector})
	if err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, fmt.Errorf("%d controller Deployments in %s (label %s), want 1: is the chart installed with controller.enabled?",
			len(list.Items), c.cfg.Namespace, ControllerLabelSelector)
	}
	return &list.Items[0], nil
}

// StopController scales the controller Deployment to zero, as an operator
// does, and waits until its pods are gone: no webhook answers (with the
// chart's failurePolicy Ignore, claims are admitted unchecked) and nobody
// manages the DeviceClasses. The replicas are kept in an annotation.
func (c *Cluster) StopController(ctx context.Context) error {
	d, err := c.ControllerDeployment(ctx)
	if err != nil {
		return err
	}
	cs, err := c.Client()
	if err != nil {
		return err
	}
	if d.Spec.Replicas != nil && *d.Spec.Replicas > 0 {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			stoppedReplicasAnnotation: strconv.Itoa(int(*d.Spec.Replicas))}}})
		if _, err := cs.AppsV1().Deployments(d.Namespace).Patch(ctx, d.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("record the replicas of %s: %w", d.Name, err)
		}
	}
	if err := c.scaleController(ctx, d, 0); err != nil {
		return err
	}
	err = c.waitFor(ctx, "no controller pod", []string{apiserverName}, func(ctx context.Context) error {
		pods, err := cs.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: ControllerLabelSelector})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("controller pod %s still there", pods.Items[0].Name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.logf("controller stopped (deployment %s scaled to 0)", d.Name)
	return nil
}

// StartController scales the controller Deployment back to the replicas
// StopController recorded (the chart's, 1 without a record) and waits until
// it is available and its webhook, through its Service, refuses an invalid
// claim.
func (c *Cluster) StartController(ctx context.Context) error {
	d, err := c.ControllerDeployment(ctx)
	if err != nil {
		return err
	}
	replicas := 1
	if v, ok := d.Annotations[stoppedReplicasAnnotation]; ok {
		if replicas, err = strconv.Atoi(v); err != nil || replicas < 1 {
			return fmt.Errorf("deployment %s: annotation %s=%q is not a replica count", d.Name, stoppedReplicasAnnotation, v)
		}
	} else if d.Spec.Replicas != nil && *d.Spec.Replicas > 0 {
		replicas = int(*d.Spec.Replicas)
	}
	if err := c.scaleController(ctx, d, int32(replicas)); err != nil {
		return err
	}
	cs, err := c.Client()
	if err != nil {
		return err
	}
	patch := []byte(`{"metadata":{"annotations":{"` + stoppedReplicasAnnotation + `":null}}}`)
	if _, err := cs.AppsV1().Deployments(d.Namespace).Patch(ctx, d.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "the controller available", []string{apiserverName}, func(ctx context.Context) error {
		return deploymentsReady(ctx, cs, c.cfg.Namespace)
	}); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "the webhook rejecting an invalid claim", []string{apiserverName}, func(ctx context.Context) error {
		return webhookRejects(ctx, cs, c.Names())
	}); err != nil {
		return err
	}
	c.logf("controller started (deployment %s, %d replicas)", d.Name, replicas)
	return nil
}

func (c *Cluster) scaleController(ctx context.Context, d *appsv1.Deployment, replicas int32) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace},
		Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}
	if _, err := cs.AppsV1().Deployments(d.Namespace).UpdateScale(ctx, d.Name, scale, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("scale %s to %d: %w", d.Name, replicas, err)
	}
	return nil
}

// ControllerMetricsURL is the /metrics of a Ready controller pod: its pod IP
// (reachable from the host through its node's bridge) and the port of its
// container port "metrics".
func (c *Cluster) ControllerMetricsURL(ctx context.Context) (string, error) {
	cs, err := c.Client()
	if err != nil {
		return "", err
	}
	pods, err := cs.CoreV1().Pods(c.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: ControllerLabelSelector})
	if err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			continue
		}
		for _, ctr := range p.Spec.Containers {
			for _, port := range ctr.Ports {
				if port.Name == "metrics" {
					return fmt.Sprintf("http://%s:%d/metrics", p.Status.PodIP, port.ContainerPort), nil
				}
			}
		}
	}
	return "", fmt.Errorf("no running controller pod with a container port named metrics in %s", c.cfg.Namespace)
}
