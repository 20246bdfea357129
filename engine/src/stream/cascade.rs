//! What travels up a chain of forks when one goes: the release of its source's fork count,
//! and with it, when the source is soft-deleted, the delete's answer, held until the
//! cascade it started has ended.
//!
//! A fork's removal releases its source in the source's shard, which removes the source if
//! it was soft-deleted and that was its last fork, which releases the source's own source,
//! and so on. A client that deleted the fork and then uses a name up the chain must find
//! it free: so the delete's answer goes up with the releases and is sent where the cascade
//! stops (a source that stays), or once the last removal is published. Made and answered by
//! the shards (`shard::apply` holds a delete's answer, `shard::removal` passes it on,
//! `shard::commit` sends releases and answers); the stream's handle only carries it.

use std::sync::Arc;

use crate::ids::StreamId;

/// One fork fewer reads stream `id` (named `name`); `answer`: a delete's answer that waits
/// for the cascade this release may continue.
pub(crate) struct Release {
    pub name: Arc<str>,
    pub id: StreamId,
    pub answer: Option<HeldAnswer>,
}

/// A delete's answer held for its cascade. Dropped once its delete is committed, it answers
/// that the delete succeeded — wherever the cascade stops, even where a source's removal
/// fails or its shard stops; dropped before, it answers nothing (the requester sees the
/// shard go away, as for any op of a batch that failed).
pub(crate) struct HeldAnswer {
    /// Sends the delete's success (the shard's reply, kept opaque here).
    answer: Option<Box<dyn FnOnce() + Send>>,
    committed: bool,
}

impl HeldAnswer {
    /// Holds the answer to a delete not yet committed: `answer` sends its success.
    pub(crate) fn new(answer: impl FnOnce() + Send + 'static) -> HeldAnswer {
        HeldAnswer { answer: Some(Box::new(answer)), committed: false }
    }

    /// The delete it answers is committed: dropping it now answers success.
    pub(crate) fn committed(mut self) -> HeldAnswer {
        self.committed = true;
        self
    }
}

impl Drop for HeldAnswer {
    fn drop(&mut self) {
        if !self.committed {
            return;
        }
        if let Some(answer) = self.answer.take() {
            answer();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    #[test]
    fn a_held_answer_answers_once_committed_and_never_before() {
        let held = |reply: oneshot::Sender<()>| HeldAnswer::new(move || reply.send(()).unwrap());
        let (reply, mut answer) = oneshot::channel();
        drop(held(reply));
        assert!(matches!(answer.try_recv(), Err(oneshot::error::TryRecvError::Closed)), "no answer");
        let (reply, mut answer) = oneshot::channel();
        let held = held(reply).committed();
        assert!(answer.try_recv().is_err(), "held while it lives");
        drop(held);
        assert!(matches!(answer.try_recv(), Ok(())));
    }
}
