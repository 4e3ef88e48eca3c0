//! Several questions through the model at once (`ragtime eval --batch N`).
//!
//! The decode loop ([`super::RagLoop::answer_with`]) is written once, as an `async fn` over a [`Decoder`]. A
//! plain [`Session`] is a decoder whose forward passes finish at once ([`block_on`] runs the loop as ordinary
//! code). A [`Lane`] of a [`Batch`] instead parks its forward request and waits; [`Batch::run`] polls every
//! lane until each is parked or done, then feeds all parked requests to the model in one pass
//! ([`Lm::feed_many`]) and polls again. A lane's step parks with its sampler, and the batch chooses the tokens of
//! all parked steps at once, over the rayon pool, before the pass. One thread runs the lanes, no locks, no
//! timing: which requests share a pass depends only on the program, and every lane gets exactly the tokens and
//! internals a session of its own would get (`feed_many` shares only work whose per-row arithmetic is unchanged,
//! and each pick is made with the lane's own sampler), so a batched run writes the same predictions as a
//! sequential one.
//!
//! On the CPU what is shared is the decoding rows' products with the integer (4/8-bit) weights, which then read
//! and de-quantize each weight block once for two questions; prefill chunks still run one by one.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use anyhow::{bail, Result};

use crate::model::{pick_many, Lm, Sampler, Session};
use crate::step::TokenStep;

/// What the decode loop needs of a decoding session.
#[allow(async_fn_in_trait)] // used through generics on one thread; no Send bound wanted
pub trait Decoder {
    /// Token ids in the cache.
    fn ids(&self) -> Vec<u32>;
    /// Positions in the cache.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Tokens pushed through the model so far.
    fn forward_tokens(&self) -> usize;
    /// Rewinds to the first `len` positions (see [`Session::truncate`]).
    fn truncate(&mut self, len: usize);
    /// See [`Session::feed`].
    async fn feed(&mut self, ids: &[u32], steps_from: usize) -> Result<Vec<TokenStep>>;
    /// Chooses the next token from the current distribution, feeds it, and returns its step (see
    /// [`Session::step`]).
    async fn step(&mut self, sampler: &mut Sampler) -> Result<TokenStep>;
    /// Makes the cache hold exactly `anchor`, as a pass of its own over it on an empty cache computes it (see
    /// [`feed_prompt`]), and returns the tokens this decoder ran forward for it: the anchor's length, or 0 where
    /// it was copied from another decoder that holds it ([`Lane`]).
    async fn load_anchor(&mut self, anchor: &[u32]) -> Result<usize> {
        self.truncate(0);
        self.feed(anchor, anchor.len()).await?;
        Ok(anchor.len())
    }
}

impl Decoder for Session<'_> {
    fn ids(&self) -> Vec<u32> {
        Session::ids(self).to_vec()
    }
    fn len(&self) -> usize {
        Session::len(self)
    }
    fn forward_tokens(&self) -> usize {
        self.forward_tokens
    }
    fn truncate(&mut self, len: usize) {
        Session::truncate(self, len)
    }
    async fn feed(&mut self, ids: &[u32], steps_from: usize) -> Result<Vec<TokenStep>> {
        Session::feed(self, ids, steps_from)
    }
    async fn step(&mut self, sampler: &mut Sampler) -> Result<TokenStep> {
        Session::step(self, sampler)
    }
}

/// What [`feed_prompt`] ran.
pub struct Fed {
    /// The steps of `ids[steps_from..]`.
    pub steps: Vec<TokenStep>,
    /// Tokens of the anchor's own pass, 0 when the cache held the anchor or a lane copied it from another. The
    /// pass is run at most once per decoder, by whichever job finds the anchor missing, so a job's count of
    /// forward tokens leaves it out: the count is then the same whether the job ran first, after a resume, or on
    /// any lane of a batch.
    pub anchor_pass: usize,
}

/// Feeds the prompt `ids` into `s`, keeping at most `keep_max` of the positions the cache already holds
/// (`keep_max <= steps_from`). `new_job`: the first prompt of a job (a question, an article).
///
/// What may be kept: the engine's numbers for a position depend, in their last bits, on how the positions before
/// it were cut into forward passes (a pass of a few rows takes other kernel paths than a long one). A job must
/// come out the same whichever jobs its decoder did before (one session doing them all in turn, or one lane of a
/// batch doing some), so its first prompt keeps nothing of earlier jobs but `anchor`: a prefix of every job's
/// prompts (the few-shot exemplars; empty for none), which is always encoded as a pass of its own on an empty
/// cache (or copied from a decoder that did so: the lanes of a [`Batch`] run it once between them). Later prompts
/// of a job keep their common prefix with what the job fed before.
pub async fn feed_prompt<D: Decoder>(
    s: &mut D,
    anchor: &[u32],
    new_job: bool,
    ids: &[u32],
    keep_max: usize,
    steps_from: usize,
) -> Result<Fed> {
    let anchored = !anchor.is_empty() && anchor.len() <= keep_max && ids.starts_with(anchor);
    let mut keep = common_prefix(&s.ids(), ids).min(keep_max);
    if new_job {
        keep = keep.min(if anchored { anchor.len() } else { 0 });
    }
    // so that cached anchor positions were always computed by the anchor's own pass
    let mut anchor_pass = 0;
    if anchored && keep < anchor.len() {
        anchor_pass = s.load_anchor(anchor).await?;
        keep = anchor.len();
    }
    s.truncate(keep);
    let steps = s.feed(&ids[keep..], steps_from - keep).await?;
    Ok(Fed { steps, anchor_pass })
}

/// Length of the longest common prefix of `a` and `b`.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Runs a future whose awaits never wait (a loop over a [`Session`]) to completion.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("block_on: the future waited; run lanes of a Batch with Batch::run"),
    }
}

struct Request {
    lane: usize,
    ids: Vec<u32>,
    steps_from: usize,
    /// A step ([`Lane::step`]): the token to feed is first chosen with this sampler (`ids` empty until then), which
    /// is handed back advanced.
    pick: Option<Sampler>,
}

/// Sessions that are fed together: one per [`Lane`]. Each keeps its cache across the questions its lane
/// answers, and the few-shot prefix (a job's anchor, [`feed_prompt`]) is encoded once per batch: the other lanes
/// copy its keys and values.
pub struct Batch<'lm> {
    lm: &'lm Lm,
    sessions: Vec<RefCell<Session<'lm>>>,
    parked: RefCell<Vec<Request>>,
    results: Vec<RefCell<Option<Result<Vec<TokenStep>>>>>,
    /// Each stepping lane's sampler, handed back after its pick.
    samplers: Vec<RefCell<Option<Sampler>>>,
    /// Forward passes run, and sequences fed in them (for the mean batch size).
    pub passes: std::cell::Cell<usize>,
    pub fed: std::cell::Cell<usize>,
    /// Lanes whose cache starts with an anchor computed by its own pass (or copied from one): `(lane, anchor)`.
    /// A lane that needs an anchor another lane holds copies it ([`Lane::load_anchor`]).
    anchored: RefCell<Vec<(usize, Vec<u32>)>>,
    /// Anchors run by a pass of their own, and anchors copied from lane to lane.
    pub anchor_passes: std::cell::Cell<usize>,
    pub anchor_copies: std::cell::Cell<usize>,
}

/// Hands on outputs numbered 0, 1, 2, ... in that order, whatever order they arrive in: jobs on lanes finish in any
/// order, and what they write (prediction records, label rows, dialogues) is written in input order, so a run's
/// files are those of one lane. An output waits here until every one before it has been handed on.
pub struct InOrder<T> {
    next: usize,
    waiting: BTreeMap<usize, T>,
}

impl<T> Default for InOrder<T> {
    fn default() -> Self {
        InOrder { next: 0, waiting: BTreeMap::new() }
    }
}

impl<T> InOrder<T> {
    /// Takes output `i` and hands on, in order, every output from the next one due up to the first still missing,
    /// each with the number of outputs that have arrived so far, handed on or waiting: the jobs finished, which a
    /// progress line's rate counts (one long job holds back the outputs of the many that finish after it).
    pub fn push(&mut self, i: usize, out: T, mut hand_on: impl FnMut(T, usize) -> Result<()>) -> Result<()> {
        self.waiting.insert(i, out);
        // every output that has arrived is handed on (those before `next`) or waiting
        let arrived = self.next + self.waiting.len();
        while let Some(o) = self.waiting.remove(&self.next) {
            hand_on(o, arrived)?;
            self.next += 1;
        }
        Ok(())
    }
}

impl<'lm> Batch<'lm> {
    pub fn new(lm: &'lm Lm, lanes: usize) -> Self {
        assert!(lanes > 0, "a batch needs at least one lane");
        Batch {
            lm,
            sessions: (0..lanes).map(|_| RefCell::new(lm.session())).collect(),
            parked: RefCell::new(Vec::new()),
            results: (0..lanes).map(|_| RefCell::new(None)).collect(),
            samplers: (0..lanes).map(|_| RefCell::new(None)).collect(),
            passes: Default::default(),
            fed: Default::default(),
            anchored: Default::default(),
            anchor_passes: Default::default(),
            anchor_copies: Default::default(),
        }
    }

    pub fn lanes(&self) -> usize {
        self.sessions.len()
    }

    /// One line for the log: lanes, forward passes, the mean number of sequences a pass fed (`what`, e.g.
    /// "questions", names what a sequence is), and how often the few-shot prefix ran and was copied.
    pub fn summary(&self, what: &str) -> String {
        let mut line = format!(
            "batch: {} lanes, {} forward passes, {:.2} {what} per pass",
            self.lanes(),
            self.passes.get(),
            self.fed.get() as f64 / self.passes.get().max(1) as f64
        );
        if self.anchor_passes.get() > 0 {
            let (runs, copies) = (self.anchor_passes.get(), self.anchor_copies.get());
            line.push_str(&format!("; few-shot prefix run {runs}x, copied {copies}x"));
        }
        line
    }

    /// Lane `i`'s decoder.
    pub fn lane(&self, i: usize) -> Lane<'_, 'lm> {
        Lane { batch: self, idx: i }
    }

    /// Keeps every lane busy with jobs until `next` has none left: `next(i)` gives lane `i` its next job (a
    /// future that uses only lane `i`'s decoder), `done(output)` takes each finished job's output, in the order
    /// they finish. Each round polls every running job until it waits on the model, then feeds all waiting lanes
    /// in one forward pass.
    pub fn run<'f, T>(
        &'f self,
        mut next: impl FnMut(usize) -> Option<Pin<Box<dyn Future<Output = T> + 'f>>>,
        mut done: impl FnMut(T) -> Result<()>,
    ) -> Result<()> {
        let mut jobs: Vec<Option<Pin<Box<dyn Future<Output = T> + 'f>>>> = (0..self.lanes()).map(&mut next).collect();
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            for (i, slot) in jobs.iter_mut().enumerate() {
                // a finished job frees its lane for the next one, which runs up to its first wait right away
                while let Some(job) = slot {
                    match job.as_mut().poll(&mut cx) {
                        Poll::Ready(out) => {
                            done(out)?;
                            *slot = next(i);
                        }
                        Poll::Pending => break,
                    }
                }
            }
            if jobs.iter().all(Option::is_none) {
                return Ok(());
            }
            self.pass()?;
        }
    }

    /// [`Batch::run`] over slots of `per_slot` lanes: slot k (lanes `per_slot * k ..`) owns `states[k]` (what
    /// runs on its lanes, for example a question's generators, kept from job to job so a prefix cached on them is
    /// reused) and takes the next of `jobs` whenever it is free. `work(state, job)` runs one job on the slot's
    /// lanes and hands the state back with its output; `done` takes the outputs in the order they finish.
    pub fn run_slots<'f, S: 'f, J, T: 'f>(
        &'f self,
        per_slot: usize,
        states: Vec<S>,
        jobs: impl IntoIterator<Item = J>,
        work: impl Fn(S, J) -> Pin<Box<dyn Future<Output = (S, T)> + 'f>>,
        mut done: impl FnMut(T) -> Result<()>,
    ) -> Result<()> {
        assert!(per_slot > 0 && states.len() * per_slot <= self.lanes(), "run_slots: more slots than lanes");
        let states: Vec<std::cell::Cell<Option<S>>> = states.into_iter().map(|s| Some(s).into()).collect();
        let states = &states;
        let mut jobs = jobs.into_iter();
        self.run(
            |lane| {
                let k = lane / per_slot;
                if lane % per_slot != 0 || k >= states.len() {
                    return None;
                }
                let job = jobs.next()?;
                let state = states[k].take().expect("a slot runs one job at a time");
                let running = work(state, job);
                Some(Box::pin(async move {
                    let (state, out) = running.await;
                    (k, state, out)
                }))
            },
            |(k, state, out)| {
                states[k].set(Some(state));
                done(out)
            },
        )
    }

    /// One forward pass over every parked request, the steps' tokens chosen first.
    fn pass(&self) -> Result<()> {
        let mut reqs = std::mem::take(&mut *self.parked.borrow_mut());
        if reqs.is_empty() {
            bail!("batch: every running lane waits, but none asked the model for anything");
        }
        self.pick(&mut reqs);
        if reqs.is_empty() {
            return Ok(()); // every step's pick failed; each lane has its error
        }
        let mut guards: Vec<_> = reqs.iter().map(|r| self.sessions[r.lane].borrow_mut()).collect();
        let mut sessions: Vec<&mut Session<'lm>> = guards.iter_mut().map(|g| &mut **g).collect();
        let ids: Vec<&[u32]> = reqs.iter().map(|r| r.ids.as_slice()).collect();
        let from: Vec<usize> = reqs.iter().map(|r| r.steps_from).collect();
        self.passes.set(self.passes.get() + 1);
        self.fed.set(self.fed.get() + reqs.len());
        match self.lm.feed_many(&mut sessions, &ids, &from) {
            Ok(outs) => {
                for (r, o) in reqs.iter().zip(outs) {
                    *self.results[r.lane].borrow_mut() = Some(Ok(o));
                }
            }
            // the pass failed for all: each lane gets the error
            Err(e) => {
                for r in &reqs {
                    *self.results[r.lane].borrow_mut() = Some(Err(anyhow::anyhow!("{e:#}")));
                }
            }
        }
        Ok(())
    }

    /// Chooses the token of every parked step, each with its lane's sampler, the lanes spread over the rayon pool
    /// ([`pick_many`]). A step whose pick fails (nothing fed yet) leaves the pass, with its error as its result.
    fn pick(&self, reqs: &mut Vec<Request>) {
        if reqs.iter().all(|r| r.pick.is_none()) {
            return;
        }
        let guards: Vec<_> = reqs.iter().map(|r| self.sessions[r.lane].borrow()).collect();
        let (mut picks, mut picked, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        for (k, (session, r)) in guards.iter().zip(reqs.iter_mut()).enumerate() {
            let Some(sampler) = r.pick.as_mut() else { continue };
            match session.picker() {
                Ok(p) => {
                    picks.push((p, sampler));
                    picked.push(k);
                }
                Err(e) => failed.push((k, e)),
            }
        }
        let ids = pick_many(picks);
        drop(guards);
        for (k, id) in picked.into_iter().zip(ids) {
            let r = &mut reqs[k];
            r.ids = vec![id];
            *self.samplers[r.lane].borrow_mut() = r.pick.take();
        }
        for (k, e) in failed.into_iter().rev() {
            let r = reqs.remove(k);
            *self.results[r.lane].borrow_mut() = Some(Err(e));
        }
    }
}

/// One lane of a [`Batch`]: a [`Decoder`] whose forward requests wait for the batch's next pass.
pub struct Lane<'b, 'lm> {
    batch: &'b Batch<'lm>,
    idx: usize,
}

/// Waits for the result of lane `idx`'s parked request.
struct Parked<'b, 'lm> {
    batch: &'b Batch<'lm>,
    idx: usize,
}

impl Future for Parked<'_, '_> {
    type Output = Result<Vec<TokenStep>>;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        match self.batch.results[self.idx].borrow_mut().take() {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }
}

impl Decoder for Lane<'_, '_> {
    fn ids(&self) -> Vec<u32> {
        self.batch.sessions[self.idx].borrow().ids().to_vec()
    }
    fn len(&self) -> usize {
        self.batch.sessions[self.idx].borrow().len()
    }
    fn forward_tokens(&self) -> usize {
        self.batch.sessions[self.idx].borrow().forward_tokens
    }
    fn truncate(&mut self, len: usize) {
        // a rewind into an anchor leaves this lane without it
        self.batch.anchored.borrow_mut().retain(|(lane, a)| *lane != self.idx || a.len() <= len);
        self.batch.sessions[self.idx].borrow_mut().truncate(len)
    }
    async fn feed(&mut self, ids: &[u32], steps_from: usize) -> Result<Vec<TokenStep>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        self.batch.parked.borrow_mut().push(Request { lane: self.idx, ids: ids.to_vec(), steps_from, pick: None });
        Parked { batch: self.batch, idx: self.idx }.await
    }
    /// Parks the step with (a copy of) its sampler: the batch chooses every waiting lane's token at once, before
    /// the pass that feeds them (`Batch::pick`), and hands the sampler back advanced.
    async fn step(&mut self, sampler: &mut Sampler) -> Result<TokenStep> {
        let (batch, idx) = (self.batch, self.idx);
        batch.parked.borrow_mut().push(Request {
            lane: idx,
            ids: Vec::new(),
            steps_from: 0,
            pick: Some(sampler.clone()),
        });
        let steps = Parked { batch, idx }.await?;
        *sampler = batch.samplers[idx].borrow_mut().take().expect("a fed step hands its sampler back");
        Ok(steps.into_iter().next_back().expect("one step for one token"))
    }
    /// Copies the anchor from a lane that holds it; the first lane to need it runs its pass at once, alone (not
    /// parked for the batch's next pass), so that the lanes polled after it find it and copy it. Either way the
    /// lane holds what a pass of its own over the anchor on an empty cache computes, bit for bit.
    async fn load_anchor(&mut self, anchor: &[u32]) -> Result<usize> {
        let b = self.batch;
        self.truncate(0);
        let donor = (b.anchored.borrow().iter())
            .find(|(lane, a)| a == anchor && b.sessions[*lane].borrow().ids().starts_with(a))
            .map(|&(lane, _)| lane);
        let mut s = b.sessions[self.idx].borrow_mut();
        let ran = match donor {
            Some(lane) => {
                s.copy_prefix_from(&b.sessions[lane].borrow(), anchor.len())?;
                b.anchor_copies.set(b.anchor_copies.get() + 1);
                0
            }
            None => {
                s.feed(anchor, anchor.len())?;
                b.passes.set(b.passes.get() + 1);
                b.fed.set(b.fed.get() + 1);
                b.anchor_passes.set(b.anchor_passes.get() + 1);
                anchor.len()
            }
        };
        b.anchored.borrow_mut().push((self.idx, anchor.to_vec()));
        Ok(ran)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decoder that records each forward pass (the ids fed) and nothing else.
    #[derive(Default)]
    struct Recorder {
        cache: Vec<u32>,
        passes: Vec<Vec<u32>>,
    }

    impl Decoder for Recorder {
        fn ids(&self) -> Vec<u32> {
            self.cache.clone()
        }
        fn len(&self) -> usize {
            self.cache.len()
        }
        fn forward_tokens(&self) -> usize {
            self.passes.iter().map(Vec::len).sum()
        }
        fn truncate(&mut self, len: usize) {
            self.cache.truncate(len);
        }
        async fn feed(&mut self, ids: &[u32], steps_from: usize) -> Result<Vec<TokenStep>> {
            let start = self.cache.len();
            self.cache.extend_from_slice(ids);
            self.passes.push(ids.to_vec());
            Ok((steps_from..ids.len())
                .map(|i| TokenStep { pos: start + i, id: ids[i], ..Default::default() })
                .collect())
        }
        async fn step(&mut self, _: &mut Sampler) -> Result<TokenStep> {
            unreachable!("the anchor tests feed prompts only")
        }
    }

    /// Anchor `[1, 2, 3]`. Job A's first prompt `[1, 2, 3, 10, 11]`: the anchor gets a pass of its own (3 tokens,
    /// reported), then `[10, 11]`. A's next prompt `[1, 2, 3, 10, 12]` keeps the common prefix (4) and feeds `[12]`.
    /// Job B's first prompt `[1, 2, 3, 10, 11]` shares 4 positions with the cache but keeps only the anchor: it feeds
    /// `[10, 11]`, and no anchor pass. A prompt that does not start with the anchor keeps nothing of another job.
    #[test]
    fn jobs_keep_only_the_anchor_and_report_its_own_pass() {
        let anchor = [1, 2, 3];
        let mut d = Recorder::default();
        let run = |d: &mut Recorder, new_job: bool, ids: &[u32]| {
            block_on(feed_prompt(d, &anchor, new_job, ids, ids.len() - 1, ids.len() - 1)).unwrap()
        };
        let a1 = run(&mut d, true, &[1, 2, 3, 10, 11]);
        assert_eq!(d.passes, vec![vec![1, 2, 3], vec![10, 11]]);
        assert_eq!(a1.anchor_pass, 3);
        assert_eq!(a1.steps.iter().map(|s| (s.pos, s.id)).collect::<Vec<_>>(), vec![(4, 11)]);
        let a2 = run(&mut d, false, &[1, 2, 3, 10, 12]);
        assert_eq!((d.passes.last().unwrap().clone(), a2.anchor_pass), (vec![12], 0));
        let b1 = run(&mut d, true, &[1, 2, 3, 10, 11]);
        assert_eq!((d.passes.last().unwrap().clone(), b1.anchor_pass), (vec![10, 11], 0));
        assert_eq!(d.cache, vec![1, 2, 3, 10, 11]);
        // a job's forward tokens less its anchor passes do not depend on what the decoder did before
        let mut fresh = Recorder::default();
        let b_alone = run(&mut fresh, true, &[1, 2, 3, 10, 11]);
        assert_eq!(fresh.forward_tokens() - b_alone.anchor_pass, 2);
        // not anchored: a new job starts from an empty cache
        let c = run(&mut d, true, &[1, 2, 9]);
        assert_eq!((d.passes.last().unwrap().clone(), c.anchor_pass), (vec![1, 2, 9], 0));
    }

    #[test]
    fn in_order_hands_outputs_on_in_input_order() {
        let (mut order, mut out) = (InOrder::default(), Vec::new());
        for (i, x) in [(2, 'c'), (0, 'a'), (3, 'd'), (1, 'b')] {
            order
                .push(i, x, |x, arrived| {
                    out.push((x, arrived));
                    Ok(())
                })
                .unwrap();
            if i == 0 {
                assert_eq!(out, [('a', 2)], "0 handed on at once, 2 still waits for 1");
            }
        }
        // 'b' came fourth and freed 'c' and 'd', which had arrived before it
        assert_eq!(out, [('a', 2), ('b', 4), ('c', 4), ('d', 4)]);
    }
}
