//! The engine through its public API: every state transition, limit and expiry rule, with a
//! manual clock so nothing here sleeps to let time pass.

use bytes::Bytes;
use ds_engine::testing::producer_charge;
use ds_engine::testing::{stream_charge, APPEND_CHARGE_BYTES};
use ds_engine::Clock;
use ds_engine::Limits;
use ds_engine::{
    AppendKind, AppendRequest, ContentType, CreateRequest, Engine, EngineConfig, Offset, OpError, Payload,
    ProducerTag, StartAt, StreamConfig, StreamName,
};

const T0: u64 = 1_700_000_000_000;

fn engine_with(limits: Limits, clock: &Clock) -> Engine {
    let config = EngineConfig { shard_count: 4, limits, clock: clock.clone(), ..EngineConfig::default() };
    Engine::start(config).expect("engine starts")
}

fn engine() -> (Engine, Clock) {
    let clock = Clock::manual(T0);
    (engine_with(Limits::default(), &clock), clock)
}

fn name(text: &str) -> StreamName {
    StreamName::new(text).unwrap()
}

fn config(content_type: &str) -> StreamConfig {
    StreamConfig {
        content_type: ContentType::parse(content_type).unwrap(),
        ttl_secs: None,
        expires_at_ms: None,
    }
}

fn create_request(stream: &str, config: StreamConfig) -> CreateRequest {
    CreateRequest { name: name(stream), config, initial: None, closed: false }
}

fn text(body: &str) -> Option<Payload> {
    Some(Payload::raw(Bytes::copy_from_slice(body.as_bytes())))
}

fn append_request(stream: &str, body: &str) -> AppendRequest {
    AppendRequest {
        name: name(stream),
        content_type: Some(ContentType::parse("text/plain").unwrap()),
        payload: text(body),
        close: false,
        producer: None,
        stream_seq: None,
    }
}

fn tagged(stream: &str, body: &str, producer: &str, epoch: u64, seq: u64) -> AppendRequest {
    AppendRequest {
        producer: Some(ProducerTag { id: producer.into(), epoch, seq }),
        ..append_request(stream, body)
    }
}

fn read_all(engine: &Engine, stream: &str) -> String {
    let handle = engine.open(&name(stream)).expect("stream exists");
    let result = handle.read(StartAt::Beginning, usize::MAX).unwrap().unwrap();
    result.chunk.slices.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect()
}

#[tokio::test]
async fn create_append_read_delete() {
    let (engine, _clock) = engine();
    let created = engine.create(create_request("s", config("text/plain"))).await.unwrap();
    assert!(created.created);
    assert_eq!(created.tail, Offset::ZERO);
    let first = engine.append(append_request("s", "hello")).await.unwrap();
    assert_eq!((first.kind, first.tail), (AppendKind::Stored, Offset { messages: 1, bytes: 5 }));
    engine.append(append_request("s", " world")).await.unwrap();
    assert_eq!(read_all(&engine, "s"), "hello world");

    let handle = engine.open(&name("s")).unwrap();
    let rest = handle.read(StartAt::At(first.tail), usize::MAX).unwrap().unwrap();
    assert_eq!(&rest.chunk.slices[0][..], b" world");
    assert!(rest.up_to_date());
    let not_boundary = handle.read(StartAt::At(Offset { messages: 1, bytes: 3 }), 10);
    assert!(not_boundary.is_err(), "offsets must be message boundaries");

    engine.delete(name("s")).await.unwrap();
    assert!(engine.open(&name("s")).is_none());
    assert!(handle.status().is_none(), "old handles see the stream gone");
    assert_eq!(engine.delete(name("s")).await, Err(OpError::NotFound));
    assert_eq!(engine.append(append_request("s", "x")).await.err(), Some(OpError::NotFound));
    assert_eq!(engine.stats().stored_bytes, 0, "a delete returns the bytes to the budget");
}

#[tokio::test]
async fn idempotent_create_compares_config_and_closed_state() {
    let (engine, _clock) = engine();
    let mut first = create_request("s", config("application/json"));
    first.closed = true;
    assert!(engine.create(first).await.unwrap().created);
    let mut again = create_request("s", config("APPLICATION/JSON; charset=utf-8"));
    again.closed = true;
    let outcome = engine.create(again).await.unwrap();
    assert!(!outcome.created);
    assert_eq!(outcome.content_type.as_str(), "application/json", "answers with the stream's own spelling");
    let open_again = create_request("s", config("application/json"));
    assert_eq!(engine.create(open_again).await, Err(OpError::ConfigMismatch), "closed state differs");
    let other_type = CreateRequest { closed: true, ..create_request("s", config("text/plain")) };
    assert_eq!(engine.create(other_type).await, Err(OpError::ConfigMismatch));
    let mut with_ttl = create_request("s", config("application/json"));
    with_ttl.closed = true;
    with_ttl.config.ttl_secs = Some(5);
    assert_eq!(engine.create(with_ttl).await, Err(OpError::ConfigMismatch));
}

#[tokio::test]
async fn content_type_and_closing_rules() {
    let (engine, _clock) = engine();
    engine.create(create_request("s", config("text/plain"))).await.unwrap();
    let mut wrong_type = append_request("s", "x");
    wrong_type.content_type = Some(ContentType::parse("application/json").unwrap());
    assert_eq!(engine.append(wrong_type).await.err(), Some(OpError::ContentTypeMismatch));

    let mut close_with_data = append_request("s", "last");
    close_with_data.close = true;
    let closed = engine.append(close_with_data).await.unwrap();
    assert!(closed.closed);
    let tail = closed.tail;
    assert_eq!(engine.append(append_request("s", "late")).await.err(), Some(OpError::StreamClosed { tail }));
    let close_again =
        AppendRequest { payload: None, close: true, content_type: None, ..append_request("s", "") };
    let again = engine.append(close_again).await.unwrap();
    assert_eq!((again.kind, again.tail, again.closed), (AppendKind::Closed, tail, true));
    let empty = AppendRequest { payload: None, content_type: None, ..append_request("s", "") };
    assert_eq!(engine.append(empty).await.err(), Some(OpError::EmptyAppend));
    let read = engine.open(&name("s")).unwrap().read(StartAt::Tail, 100).unwrap().unwrap();
    assert!(read.closed_at_tail());
}

#[tokio::test]
async fn producers_deduplicate_and_fence() {
    let (engine, _clock) = engine();
    engine.create(create_request("s", config("text/plain"))).await.unwrap();
    let ok = engine.append(tagged("s", "a0", "p", 0, 0)).await.unwrap();
    assert_eq!((ok.kind, ok.producer), (AppendKind::Stored, Some((0, 0))));
    engine.append(tagged("s", "a1", "p", 0, 1)).await.unwrap();
    engine.append(tagged("s", "a2", "p", 0, 2)).await.unwrap();
    let duplicate = engine.append(tagged("s", "a1", "p", 0, 1)).await.unwrap();
    assert_eq!(
        (duplicate.kind, duplicate.producer),
        (AppendKind::Duplicate, Some((0, 2))),
        "reports the highest seq"
    );
    assert_eq!(
        engine.append(tagged("s", "x", "p", 0, 5)).await.err(),
        Some(OpError::SeqGap { expected: 3, received: 5 })
    );
    assert_eq!(engine.append(tagged("s", "x", "p", 1, 3)).await.err(), Some(OpError::EpochSeqNotZero));
    engine.append(tagged("s", "b0", "p", 1, 0)).await.unwrap();
    assert_eq!(
        engine.append(tagged("s", "zombie", "p", 0, 3)).await.err(),
        Some(OpError::StaleEpoch { current: 1 })
    );
    engine.append(tagged("s", "q", "other", 7, 9)).await.unwrap();
    assert_eq!(read_all(&engine, "s"), "a0a1a2b0q");
}

#[tokio::test]
async fn memory_mode_forgets_producers_idle_for_seven_days() {
    let (engine, clock) = engine();
    engine.create(create_request("s", config("text/plain"))).await.unwrap();
    engine.append(tagged("s", "a", "p", 5, 0)).await.unwrap();
    clock.advance_ms(6 * 24 * 3600 * 1000);
    assert_eq!(
        engine.append(tagged("s", "b", "p", 0, 0)).await.err(),
        Some(OpError::StaleEpoch { current: 5 })
    );
    clock.advance_ms(8 * 24 * 3600 * 1000);
    let fresh = engine.append(tagged("s", "c", "p", 0, 0)).await.unwrap();
    assert_eq!(fresh.kind, AppendKind::Stored, "an idle producer is treated as new");
}

#[tokio::test]
async fn a_retried_closing_request_is_a_duplicate() {
    let (engine, _clock) = engine();
    engine.create(create_request("s", config("text/plain"))).await.unwrap();
    let mut closing = tagged("s", "final", "p", 0, 0);
    closing.close = true;
    let first = engine.append(closing).await.unwrap();
    assert_eq!((first.kind, first.closed), (AppendKind::Stored, true));
    let mut retry = tagged("s", "final-again", "p", 0, 0);
    retry.close = true;
    let second = engine.append(retry).await.unwrap();
    assert_eq!((second.kind, second.closed), (AppendKind::Duplicate, true));
    let mut next_seq = tagged("s", "more", "p", 0, 1);
    next_seq.close = true;
    assert!(matches!(engine.append(next_seq).await, Err(OpError::StreamClosed { .. })));
    assert_eq!(read_all(&engine, "s"), "final");
}

#[tokio::test]
async fn a_closed_stream_is_named_before_any_other_refusal() {
    let (engine, _clock) = engine();
    engine.create(create_request("s", config("text/plain"))).await.unwrap();
    engine.append(tagged("s", "a", "p", 3, 0)).await.unwrap();
    let mut closing = tagged("s", "b", "p", 3, 1);
    closing.close = true;
    let tail = engine.append(closing).await.unwrap().tail;
    let closed = Some(OpError::StreamClosed { tail });
    // Each of these is refused for another reason on an open stream.
    let mut wrong_type = append_request("s", "x");
    wrong_type.content_type = Some(ContentType::parse("application/json").unwrap());
    assert_eq!(engine.append(wrong_type).await.err(), closed, "another content type");
    assert_eq!(engine.append(tagged("s", "x", "p", 2, 0)).await.err(), closed, "a stale epoch");
    assert_eq!(engine.append(tagged("s", "x", "p", 3, 5)).await.err(), closed, "a sequence gap");
    assert_eq!(engine.append(tagged("s", "x", "p", 4, 1)).await.err(), closed, "a new epoch not at 0");
    let mut regressing = append_request("s", "x");
    regressing.stream_seq = Some("0".into());
    assert_eq!(engine.append(regressing).await.err(), closed, "any Stream-Seq");
    // A producer's duplicate still succeeds without writing.
    let earlier = engine.append(tagged("s", "a", "p", 3, 0)).await.unwrap();
    assert_eq!((earlier.kind, earlier.closed, earlier.tail), (AppendKind::Duplicate, true, tail));
    assert_eq!(read_all(&engine, "s"), "ab");
}

#[tokio::test]
async fn stream_seq_must_increase_bytewise() {
    let (engine, _clock) = engine();
    engine.create(create_request("s", config("text/plain"))).await.unwrap();
    let with_seq = |seq: &str| AppendRequest { stream_seq: Some(seq.into()), ..append_request("s", "x") };
    engine.append(with_seq("09")).await.unwrap();
    engine.append(with_seq("10")).await.unwrap();
    assert_eq!(engine.append(with_seq("10")).await.err(), Some(OpError::StreamSeqRegression));
    assert_eq!(engine.append(with_seq("099")).await.err(), Some(OpError::StreamSeqRegression));
    engine.append(with_seq("2")).await.expect("\"2\" sorts after \"10\" bytewise");
    assert_eq!(engine.append(with_seq("10")).await.err(), Some(OpError::StreamSeqRegression));
}

#[tokio::test]
async fn byte_limits_refuse_without_storing() {
    let clock = Clock::manual(T0);
    // Two streams, appends of 5 and 4 bytes (each an append's charge more), and 65 to spare:
    // one more append of 2 bytes costs 66.
    let appends = (5 + APPEND_CHARGE_BYTES) + (4 + APPEND_CHARGE_BYTES);
    let total_bytes_max = 2 * stream_charge("a", "text/plain") + appends + 65;
    let limits = Limits { total_bytes_max, stream_bytes_max: 6, ..Limits::default() };
    let engine = engine_with(limits, &clock);
    engine.create(create_request("a", config("text/plain"))).await.unwrap();
    engine.create(create_request("b", config("text/plain"))).await.unwrap();
    engine.append(append_request("a", "12345")).await.unwrap();
    assert_eq!(engine.append(append_request("a", "67")).await.err(), Some(OpError::StreamFull));
    engine.append(append_request("b", "1234")).await.unwrap();
    assert_eq!(engine.append(append_request("b", "56")).await.err(), Some(OpError::MemoryFull));
    assert_eq!(read_all(&engine, "b"), "1234", "a refused append stores nothing");
    engine.delete(name("a")).await.unwrap();
    engine.append(append_request("b", "56")).await.unwrap();
    let too_big = CreateRequest { initial: text("1234567"), ..create_request("c", config("text/plain")) };
    assert_eq!(engine.create(too_big).await.err(), Some(OpError::StreamFull));
    assert!(engine.open(&name("c")).is_none());
    assert_eq!(engine.stats().stored_bytes, 6, "the data of what is stored");
}

#[tokio::test]
async fn streams_and_producers_are_charged_and_counted() {
    let clock = Clock::manual(T0);
    let limits = Limits { streams_max: 2, ..Limits::default() };
    let engine = engine_with(limits, &clock);
    engine.create(create_request("a", config("text/plain"))).await.unwrap();
    engine.create(create_request("b", config("text/plain"))).await.unwrap();
    let third = engine.create(create_request("c", config("text/plain"))).await;
    assert_eq!(third.err(), Some(OpError::TooManyStreams));
    engine.create(create_request("a", config("text/plain"))).await.expect("an existing stream is no new one");
    let before = engine.stats().charged_bytes;
    let id = "p".repeat(200);
    let tagged = AppendRequest {
        producer: Some(ProducerTag { id: id.as_str().into(), epoch: 0, seq: 0 }),
        ..append_request("a", "x")
    };
    engine.append(tagged).await.unwrap();
    let expected = 1 + APPEND_CHARGE_BYTES + (2 + 200 + 16) + producer_charge(&id);
    assert_eq!(engine.stats().charged_bytes - before, expected, "data, the record's meta and the producer");
    engine.delete(name("a")).await.unwrap();
    engine.create(create_request("c", config("text/plain"))).await.expect("a deleted stream frees its place");
    assert_eq!(engine.stats().charged_bytes, 2 * stream_charge("b", "text/plain"));
}

#[tokio::test]
async fn ttl_slides_with_reads_and_appends_and_expired_streams_are_absent() {
    let (engine, clock) = engine();
    let mut request = create_request("s", config("text/plain"));
    request.config.ttl_secs = Some(10);
    engine.create(request).await.unwrap();
    clock.advance_ms(8_000);
    engine.append(append_request("s", "x")).await.unwrap();
    clock.advance_ms(8_000);
    let handle = engine.open(&name("s")).expect("renewed by the append");
    assert_eq!(handle.ttl_remaining_secs(), Some(2));
    assert!(handle.status().is_some(), "status (HEAD) does not renew");
    handle.read(StartAt::Tail, 10).unwrap().unwrap();
    clock.advance_ms(9_999);
    assert!(engine.open(&name("s")).is_some(), "renewed by the read");
    clock.advance_ms(1);
    assert!(engine.open(&name("s")).is_none());
    assert_eq!(
        engine.delete(name("s")).await,
        Err(OpError::NotFound),
        "expired streams are absent for DELETE too"
    );
    assert_eq!(engine.append(append_request("s", "x")).await.err(), Some(OpError::NotFound));
    let recreated = engine.create(create_request("s", config("application/json"))).await.unwrap();
    assert!(recreated.created);
    assert_eq!(engine.stats().stored_bytes, 0);
}

#[tokio::test]
async fn absolute_expiry_does_not_slide_and_is_swept_without_access() {
    let (engine, clock) = engine();
    let mut request = create_request("s", config("text/plain"));
    request.config.expires_at_ms = Some((T0 + 5_000) as i64);
    request.initial = text("data");
    engine.create(request).await.unwrap();
    clock.advance_ms(4_000);
    engine.append(append_request("s", "more")).await.unwrap();
    assert_eq!(engine.stats().streams, 1);
    clock.advance_ms(1_000);
    // No access: the shard's own sweep must notice (it wakes at least once a second).
    for _ in 0..300 {
        if engine.stats().streams == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(engine.stats().streams, 0, "the sweep removed the expired stream");
    assert_eq!(engine.stats().stored_bytes, 0);
}

#[tokio::test]
async fn live_readers_are_woken_by_appends() {
    let (engine, _clock) = engine();
    engine.create(create_request("s", config("text/plain"))).await.unwrap();
    let handle = engine.open(&name("s")).unwrap();
    let subscription = handle.subscribe();
    assert_eq!(engine.stats().live_streams, 1);
    {
        let woken = subscription.notify().notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        engine.append(append_request("s", "x")).await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), woken).await.expect("woken by the append");
    }
    drop(subscription);
    assert_eq!(engine.stats().live_streams, 0, "no slot without readers");
}

#[tokio::test]
async fn names_route_to_every_shard_deterministically() {
    let (engine, _clock) = engine();
    let mut per_shard = [0usize; 4];
    for index in 0..4000 {
        let shard = engine.shard_index(&format!("stream-{index}"));
        assert_eq!(shard, engine.shard_index(&format!("stream-{index}")));
        per_shard[shard] += 1;
    }
    assert!(per_shard.iter().all(|count| (800..1200).contains(count)), "{per_shard:?}");
}

#[tokio::test]
async fn json_streams_keep_exact_text() {
    let (engine, _clock) = engine();
    let mut request = create_request("j", config("application/json"));
    let body = Bytes::from_static(b"[{\"b\":1,\"a\":2}, 12345678901234567890123, 1.50e3]");
    request.initial = Some(Payload::json(body, true).unwrap());
    let created = engine.create(request).await.unwrap();
    assert_eq!(created.tail.messages, 3);
    assert_eq!(read_all(&engine, "j"), "{\"b\":1,\"a\":2},12345678901234567890123,1.50e3,");
}

#[test]
fn invalid_configuration_is_refused() {
    for shard_count in [0, 3, 512] {
        let config = EngineConfig { shard_count, ..EngineConfig::default() };
        assert!(Engine::start(config).is_err(), "{shard_count}");
    }
}
