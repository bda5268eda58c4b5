//! The configured endpoints with their retry policy and hold, shared by
//! the replay (which enqueues) and the senders: the one value every part
//! of events out is handed.

use super::endpoints::{self, Endpoint, EndpointError, Target};
use super::hold::Hold;
use super::retry_policy::RetryPolicy;
use super::settings::OutboundSettings;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The configured endpoints and the policy, shared by the replay (which
/// enqueues) and the senders. Cheap to clone; empty means off.
#[derive(Debug, Clone, Default)]
pub struct Outbound {
    pub(super) endpoints: Arc<[Endpoint]>,
    pub policy: RetryPolicy,
    /// Which events wait for their settled verdict, and how long at most.
    pub hold: Hold,
    /// Woken after every enqueue, so idle senders start at once.
    pub(super) wake: Arc<Notify>,
}

impl Outbound {
    pub fn new(endpoints: Vec<Endpoint>, policy: RetryPolicy) -> Outbound {
        Outbound {
            endpoints: endpoints.into(),
            policy,
            hold: Hold::default(),
            wake: Arc::new(Notify::new()),
        }
    }

    /// The same endpoints, holding clicks and opens as `hold` says.
    pub fn holding(self, hold: Hold) -> Outbound {
        Outbound { hold, ..self }
    }

    /// What wakes idle senders: the rollup worker of the same process
    /// notifies it after a pass that may have released held rows.
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// The endpoints, policy and safety net the settings name, checked (a bad URL,
    /// secret or file entry is an error naming the setting).
    pub fn from_settings(args: &OutboundSettings) -> Result<Outbound, EndpointError> {
        let policy = RetryPolicy {
            base: Duration::from_millis(args.outbound_retry_base_ms.max(1)),
            max: Duration::from_secs(args.outbound_retry_max_secs.max(1)),
            give_up_after: Duration::from_secs(args.outbound_give_up_secs),
            ..RetryPolicy::default()
        };
        // The settle time is the verdicts' setting: `serve` adds it.
        let hold = Hold {
            grace: Duration::from_secs(args.outbound_hold_grace_secs),
            ..Hold::default()
        };
        Ok(Outbound::new(endpoints::from_settings(args)?, policy).holding(hold))
    }

    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// The endpoint named `name`.
    pub fn endpoint(&self, name: &str) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| e.name == name)
    }

    /// Resolve every webhook endpoint's host now and refuse one that
    /// leads to an address its policy does not allow (at start and in the
    /// `webhooks` commands; the senders' resolver checks again at each
    /// connection). A name that does not resolve now is left to send time.
    pub async fn check_destinations(&self) -> Result<(), EndpointError> {
        for endpoint in self.endpoints.iter() {
            if let Target::Webhook { url, .. } = &endpoint.target {
                match endpoint.destinations.check_url(url).await {
                    Ok(true) => {}
                    Ok(false) => tracing::warn!(
                        endpoint = %endpoint.name,
                        "the endpoint's host does not resolve now; its addresses are checked at send"
                    ),
                    Err(refused) => {
                        return Err(EndpointError::Destination {
                            endpoint: endpoint.name.clone(),
                            target: endpoint.target_text(),
                            refused,
                        })
                    }
                }
            }
        }
        Ok(())
    }
}
